// 2-D convolution, stride 1 with configurable zero padding, on the backend's convolution; optional
// fused ReLU.
#include "models/layers/conv2d.h"

#include "models/init.h"
#include "models/layers/precision.h"
#include "base/error.h"

namespace tower {

Conv2d::Conv2d(const std::string& name, const Conv2dShape& shape, Activation activation, uint64_t seed,
	       const Device& device)
	: shape_(shape), activation_(activation),
	  weight_(make_weight(name + ".weight", {shape.out_channels, shape.in_channels, shape.kernel, shape.kernel},
			      shape.in_channels * shape.kernel * shape.kernel, seed, device)),
	  bias_(make_bias(name + ".bias", shape.out_channels, shape.in_channels * shape.kernel * shape.kernel, seed,
			  device))
{
	TOWER_CHECK(activation != Activation::gelu, "{}: a convolution takes ReLU or no activation, not GELU", name);
}

ConvGeometry Conv2d::geometry_for(const Tensor& x) const
{
	TOWER_CHECK(x.rank() == 4 && x.dim(1) == shape_.in_channels, "{} expects input [B, {}, H, W], got {}",
		    weight_.name, shape_.in_channels, shape_text(x.shape()));
	return {shape_.in_channels, x.dim(2), x.dim(3), shape_.kernel, shape_.padding};
}

const Tensor& Conv2d::forward(const Tensor& x)
{
	g_ = geometry_for(x);
	const Ops& ops = ops_for(x.device());
	const int64_t batch = x.dim(0), oc = shape_.out_channels, pixels = g_.col_cols();
	const DType type = x.dtype(); // the compute type
	x_ = x;
	w_ = working_value(weight_, type, w_ws_);
	const Tensor b = working_value(bias_, type, b_ws_);
	y_ = y_ws_.get({batch, oc, g_.out_height(), g_.out_width()}, type, x.device());
	ops.conv2d_forward(g_, x, w_, y_, workspace(ops, type, x.device()));
	ops.bias_act(y_, b, pixels, activation_ == Activation::relu);
	return y_;
}

const Tensor& Conv2d::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(x_.data() != nullptr && dy.shape() == y_.shape(), "{}: backward of {} without a matching forward",
		    weight_.name, shape_text(dy.shape()));
	const Ops& ops = ops_for(dy.device());
	const int64_t pixels = g_.col_cols();
	const DType type = dy.dtype();
	const Tensor dz = bias_act_backward(ops, y_, Tensor(), GeluKept::input, dy, activation_, bias_, pixels, args, dz_ws_, db_ws_);

	const Tensor ws = workspace(ops, type, dy.device());
	const Tensor dw = grad_buffer(weight_, type, dw_ws_);
	ops.conv2d_backward_weights(g_, x_, dz, dw, accumulate_in_place(dw, args), ws);
	finish_grad(weight_, dw, args);

	dx_ = Tensor();
	if (args.need_input_grad) {
		dx_ = dx_ws_.get(x_.shape(), type, dy.device());
		ops.conv2d_backward_data(g_, w_, dz, dx_, ws);
	}
	return dx_;
}

Tensor Conv2d::workspace(const Ops& ops, DType type, const Device& device)
{
	if (!ops.conv_uses_columns())
		return Tensor();
	return conv_ws_.get({conv_workspace_elements(g_, shape_.out_channels, x_.dim(0), dtype_size(type))}, type, device);
}

} // namespace tower
