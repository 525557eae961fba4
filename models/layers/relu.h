// Elementwise max(0, x) as a layer of its own (Linear and Conv2d can also fuse it).
#pragma once

#include "models/layers/layer.h"
#include "models/layers/workspace.h"

namespace tower {

class ReLU final : public Layer {
public:
	const Tensor& forward(const Tensor& x) override;
	const Tensor& backward(const Tensor& dy, const BackwardArgs& args) override;

private:
	Tensor y_;
	Tensor dx_;
	Workspace y_ws_;
	Workspace dx_ws_;
};

} // namespace tower
