// LayerNorm over the last dimension, with a learned gain and bias kept (and differentiated) in f32.
#pragma once

#include <string>

#include "models/layers/layer.h"
#include "models/layers/workspace.h"

namespace tower {

class LayerNorm final : public Layer {
public:
	// Parameters "<name>.weight" (the gain, ones) and "<name>.bias" (zeros), both f32 [width].
	LayerNorm(const std::string& name, int64_t width, const Device& device, float eps = 1e-5f);

	std::vector<Parameter*> parameters() override { return {&gain_, &bias_}; }
	const Tensor& forward(const Tensor& x) override; // x: [rows, width] of the compute type
	const Tensor& backward(const Tensor& dy, const BackwardArgs& args) override;

private:
	int64_t width_;
	float eps_;
	Parameter gain_;
	Parameter bias_;
	Tensor x_;
	Tensor y_;
	Tensor mean_;
	Tensor rstd_;
	Tensor dx_;
	Workspace y_ws_;
	Workspace mean_ws_;
	Workspace rstd_ws_;
	Workspace dx_ws_;
};

} // namespace tower
