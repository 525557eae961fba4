// 2-D convolution, stride 1 with configurable zero padding, on the backend's convolution; optional
// fused ReLU.
#pragma once

#include <string>

#include "models/layers/layer.h"
#include "models/layers/linear.h"
#include "models/layers/workspace.h"
#include "models/kernels/ops.h"

namespace tower {

struct Conv2dShape {
	int64_t in_channels = 0;
	int64_t out_channels = 0;
	int64_t kernel = 0;
	int64_t padding = 0;
};

class Conv2d final : public Layer {
public:
	// Parameters "<name>.weight" [out, in, k, k] and "<name>.bias" [out], seeded from (seed, name).
	Conv2d(const std::string& name, const Conv2dShape& shape, Activation activation, uint64_t seed,
	       const Device& device);

	std::vector<Parameter*> parameters() override { return {&weight_, &bias_}; }
	const Tensor& forward(const Tensor& x) override; // x: [B, in, H, W]
	const Tensor& backward(const Tensor& dy, const BackwardArgs& args) override;

private:
	ConvGeometry geometry_for(const Tensor& x) const;
	// The workspace of backends that lower convolution to im2col + gemm (the columns and the
	// reordered output of as many images as fit in it: conv_workspace_elements), else empty.
	Tensor workspace(const Ops& ops, DType type, const Device& device);

	Conv2dShape shape_;
	Activation activation_;
	Parameter weight_;
	Parameter bias_;
	ConvGeometry g_;
	Tensor x_;
	Tensor w_; // [out, in, k, k] in the compute type of the last forward
	Tensor y_;
	Workspace w_ws_;
	Workspace b_ws_;
	Workspace dw_ws_;
	Workspace db_ws_;
	Workspace y_ws_;
	Workspace conv_ws_;
	Workspace dz_ws_;
	Workspace dx_ws_;
	Tensor dx_;
};

} // namespace tower
