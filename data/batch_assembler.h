// Gathers a rank's shard of samples into tensors on its device, reusing the same buffers each step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/fashion_mnist.h"
#include "base/tensor/tensor.h"

namespace tower {

struct Batch {
	Tensor images; // f32 [B, 1, rows, cols]
	Tensor labels; // i32 [B]
};

class BatchAssembler {
public:
	// `dataset` must outlive the assembler. Allocates host staging buffers (for a GPU device)
	// and the device tensors once.
	BatchAssembler(const Dataset& dataset, int64_t batch, const Device& device);

	// Fills the batch with the samples at `indices` (exactly `batch` of them, each in range) and
	// returns it. The tensors are the same ones every call: the next call overwrites them.
	const Batch& assemble(std::span<const int64_t> indices);

private:
	void gather(std::span<const int64_t> indices, float* images, int32_t* labels) const;

	const Dataset& dataset_;
	int64_t batch_;
	Batch batch_tensors_;
	// Used only when the device is a GPU: a CPU batch is gathered straight into its tensors.
	std::vector<float> staged_images_;
	std::vector<int32_t> staged_labels_;
};

} // namespace tower
