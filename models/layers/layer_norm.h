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
	// A residual add and this LayerNorm in one pass: forward_add writes a + b into a (which must
	// be a buffer no one reads again as it was) and normalizes that; backward_add returns
	// backward(dy) + residual.
	const Tensor& forward_add(const Tensor& a, const Tensor& b);
	const Tensor& backward_add(const Tensor& dy, const Tensor& residual, const BackwardArgs& args);

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

	void expect_input(const Tensor& x) const;
	void prepare_forward(const Tensor& x);
	void prepare_backward(const Tensor& dy);
	void notify_grads(const BackwardArgs& args);
};

} // namespace tower
