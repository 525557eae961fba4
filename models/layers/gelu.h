// The GELU activation (tanh form, GPT-2's) of a transformer's MLP.
#pragma once

#include "models/layers/layer.h"
#include "models/layers/workspace.h"

namespace tower {

class Gelu final : public Layer {
public:
	const Tensor& forward(const Tensor& x) override;
	const Tensor& backward(const Tensor& dy, const BackwardArgs& args) override;

private:
	Tensor x_;
	Tensor y_;
	Tensor dx_;
	Workspace y_ws_;
	Workspace dx_ws_;
};

} // namespace tower
