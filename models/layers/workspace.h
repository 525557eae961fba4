// A reusable per-batch buffer: memory is allocated for the largest shape asked for and reused.
#pragma once

#include "base/tensor/tensor.h"

namespace tower {

class Workspace {
public:
	// A tensor of `shape` backed by this workspace. It reallocates only when `shape` needs more
	// elements than any earlier call (or another dtype or device), so a training loop whose last
	// batch is short allocates nothing after its first step. Earlier results stay valid (they keep
	// their memory alive) but may be overwritten by later users of the workspace.
	const Tensor& get(const Shape& shape, DType dtype, const Device& device);

private:
	Tensor storage_;
	Tensor current_;
};

} // namespace tower
