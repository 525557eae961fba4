// Flattens [B, ...] into [B, features] without copying.
#pragma once

#include "models/layers/layer.h"

namespace tower {

class Flatten final : public Layer {
public:
	const Tensor& forward(const Tensor& x) override;
	const Tensor& backward(const Tensor& dy, const BackwardArgs& args) override;

private:
	Shape input_shape_;
	Tensor y_;
	Tensor dx_;
};

} // namespace tower
