// 2x2 max pooling with stride 2.
#pragma once

#include "models/layers/layer.h"
#include "models/layers/workspace.h"

namespace tower {

class MaxPool2d final : public Layer {
public:
	const Tensor& forward(const Tensor& x) override; // x: [B, C, H, W] -> [B, C, H/2, W/2]
	const Tensor& backward(const Tensor& dy, const BackwardArgs& args) override;

private:
	Shape input_shape_;
	Tensor y_;
	Tensor argmax_;
	Tensor dx_;
	Workspace y_ws_;
	Workspace argmax_ws_;
	Workspace dx_ws_;
};

} // namespace tower
