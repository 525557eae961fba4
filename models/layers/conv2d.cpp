// 2-D convolution, stride 1 with configurable zero padding, as im2col + GEMM; optional fused ReLU.
#include "models/layers/conv2d.h"

#include "models/init.h"
#include "runtime/error.h"

namespace tower {

Conv2d::Conv2d(const std::string& name, const Conv2dShape& shape, Activation activation, uint64_t seed,
	       const Device& device)
	: shape_(shape), activation_(activation),
	  weight_(make_weight(name + ".weight", {shape.out_channels, shape.in_channels, shape.kernel, shape.kernel},
			      shape.in_channels * shape.kernel * shape.kernel, seed, device)),
	  bias_(make_bias(name + ".bias", shape.out_channels, shape.in_channels * shape.kernel * shape.kernel, seed,
			  device))
{
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
	x_ = x;
	y_ = y_ws_.get({batch, oc, g_.out_height(), g_.out_width()}, DType::f32, x.device());
	const Tensor& col = col_ws_.get({g_.col_rows(), pixels}, DType::f32, x.device());
	const Tensor w = weight_.value.reshaped({oc, g_.col_rows()});
	// One image at a time keeps the column buffer small enough to stay in cache.
	for (int64_t b = 0; b < batch; ++b) {
		ops.im2col(g_, x.select(b), col);
		ops.gemm(Transpose::no, Transpose::no, 1.0f, w, col, 0.0f, y_.select(b).reshaped({oc, pixels}));
	}
	ops.bias_act(y_, bias_.value, pixels, activation_ == Activation::relu);
	return y_;
}

const Tensor& Conv2d::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(x_.data() != nullptr && dy.shape() == y_.shape(), "{}: backward of {} without a matching forward",
		    weight_.name, shape_text(dy.shape()));
	const Ops& ops = ops_for(dy.device());
	const int64_t batch = x_.dim(0), oc = shape_.out_channels, pixels = g_.col_cols();
	Tensor dz = dy;
	if (activation_ == Activation::relu) {
		dz = dz_ws_.get(dy.shape(), DType::f32, dy.device());
		ops.relu_backward(y_, dy, dz);
	}
	ops.bias_grad(dz, bias_.grad, pixels, args.accumulate);
	notify_ready(args, bias_);

	// dW = sum over images of dz_b [oc, pixels] * col_b^T; the columns are rebuilt rather than
	// kept from forward, which would need a batch's worth of them.
	const Tensor& col = col_ws_.get({g_.col_rows(), pixels}, DType::f32, dy.device());
	const Tensor dw = weight_.grad.reshaped({oc, g_.col_rows()});
	for (int64_t b = 0; b < batch; ++b) {
		ops.im2col(g_, x_.select(b), col);
		const float beta = (b == 0 && !args.accumulate) ? 0.0f : 1.0f;
		ops.gemm(Transpose::no, Transpose::yes, 1.0f, dz.select(b).reshaped({oc, pixels}), col, beta, dw);
	}
	notify_ready(args, weight_);

	dx_ = Tensor();
	if (args.need_input_grad) {
		dx_ = dx_ws_.get(x_.shape(), DType::f32, dy.device());
		const Tensor w = weight_.value.reshaped({oc, g_.col_rows()});
		for (int64_t b = 0; b < batch; ++b) {
			ops.gemm(Transpose::yes, Transpose::no, 1.0f, w, dz.select(b).reshaped({oc, pixels}), 0.0f, col);
			ops.col2im(g_, col, dx_.select(b));
		}
	}
	return dx_;
}

} // namespace tower
