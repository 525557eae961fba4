// Fully connected layer y = x W^T + b, optionally followed by a ReLU or a GELU.
#pragma once

#include <string>

#include "models/layers/bias_act.h"
#include "models/layers/layer.h"
#include "models/layers/workspace.h"

namespace tower {

class Linear final : public Layer {
public:
	// Parameters "<name>.weight" [out, in] and "<name>.bias" [out], seeded from (seed, name).
	Linear(const std::string& name, int64_t in, int64_t out, Activation activation, uint64_t seed,
	       const Device& device);
	// Parameters made by the caller (another initialization): weight [out, in] and bias [out].
	Linear(Parameter weight, Parameter bias, Activation activation);

	std::vector<Parameter*> parameters() override { return {&weight_, &bias_}; }
	const Tensor& forward(const Tensor& x) override; // x: [B, in]
	const Tensor& backward(const Tensor& dy, const BackwardArgs& args) override;

private:
	int64_t in_;
	int64_t out_;
	Activation activation_;
	Parameter weight_;
	Parameter bias_;
	Tensor x_;
	Tensor w_; // the weight in the compute type of the last forward
	Tensor z_; // with GELU: the pre-activation x W^T + b, or its slope (then dz after backward)
	GeluKept gelu_kept_ = GeluKept::input;
	Tensor y_;
	Workspace w_ws_;
	Workspace b_ws_;
	Workspace dw_ws_;
	Workspace db_ws_;
	Workspace z_ws_;
	Workspace y_ws_;
	Workspace dz_ws_;
	Workspace dx_ws_;
	Tensor dx_;
};

} // namespace tower
