// 2-D convolution, stride 1 with configurable zero padding, as im2col + GEMM; optional fused ReLU.
#include "models/layers/conv2d.h"

#include "models/init.h"
#include "models/layers/precision.h"
#include "runtime/base/error.h"

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
	const DType type = x.dtype(); // the compute type
	x_ = x;
	w_ = working_value(weight_, type, w_ws_).reshaped({oc, g_.col_rows()});
	const Tensor b = working_value(bias_, type, b_ws_);
	y_ = y_ws_.get({batch, oc, g_.out_height(), g_.out_width()}, type, x.device());
	const Tensor& col = col_ws_.get({g_.col_rows(), pixels}, type, x.device());
	// One image at a time keeps the column buffer small enough to stay in cache.
	for (int64_t i = 0; i < batch; ++i) {
		ops.im2col(g_, x.select(i), col);
		ops.gemm(Transpose::no, Transpose::no, 1.0f, w_, col, 0.0f, y_.select(i).reshaped({oc, pixels}));
	}
	ops.bias_act(y_, b, pixels, activation_ == Activation::relu);
	return y_;
}

const Tensor& Conv2d::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(x_.data() != nullptr && dy.shape() == y_.shape(), "{}: backward of {} without a matching forward",
		    weight_.name, shape_text(dy.shape()));
	const Ops& ops = ops_for(dy.device());
	const int64_t batch = x_.dim(0), oc = shape_.out_channels, pixels = g_.col_cols();
	const DType type = dy.dtype();
	Tensor dz = dy;
	if (activation_ == Activation::relu) {
		dz = dz_ws_.get(dy.shape(), type, dy.device());
		ops.relu_backward(y_, dy, dz);
	}
	const Tensor db = grad_buffer(bias_, type, db_ws_);
	ops.bias_grad(dz, db, pixels, accumulate_in_place(db, args));
	finish_grad(bias_, db, args);

	// dW = sum over images of dz_b [oc, pixels] * col_b^T; the columns are rebuilt rather than
	// kept from forward, which would need a batch's worth of them.
	const Tensor& col = col_ws_.get({g_.col_rows(), pixels}, type, dy.device());
	const Tensor dw_buffer = grad_buffer(weight_, type, dw_ws_);
	const Tensor dw = dw_buffer.reshaped({oc, g_.col_rows()});
	const bool add = accumulate_in_place(dw_buffer, args);
	for (int64_t i = 0; i < batch; ++i) {
		ops.im2col(g_, x_.select(i), col);
		const float beta = (i == 0 && !add) ? 0.0f : 1.0f;
		ops.gemm(Transpose::no, Transpose::yes, 1.0f, dz.select(i).reshaped({oc, pixels}), col, beta, dw);
	}
	finish_grad(weight_, dw_buffer, args);

	dx_ = Tensor();
	if (args.need_input_grad) {
		dx_ = dx_ws_.get(x_.shape(), type, dy.device());
		for (int64_t i = 0; i < batch; ++i) {
			ops.gemm(Transpose::yes, Transpose::no, 1.0f, w_, dz.select(i).reshaped({oc, pixels}), 0.0f, col);
			ops.col2im(g_, col, dx_.select(i));
		}
	}
	return dx_;
}

} // namespace tower
