// Fully connected layer y = x W^T + b, optionally followed by a ReLU or a GELU.
#include "models/layers/linear.h"

#include "models/init.h"
#include "models/layers/precision.h"
#include "models/kernels/ops.h"
#include "base/error.h"

namespace tower {

Linear::Linear(const std::string& name, int64_t in, int64_t out, Activation activation, uint64_t seed,
	       const Device& device)
	: in_(in), out_(out), activation_(activation),
	  weight_(make_weight(name + ".weight", {out, in}, in, seed, device)),
	  bias_(make_bias(name + ".bias", out, in, seed, device))
{
}

Linear::Linear(Parameter weight, Parameter bias, Activation activation)
	: in_(weight.value.rank() == 2 ? weight.value.dim(1) : 0), out_(weight.value.rank() == 2 ? weight.value.dim(0) : 0),
	  activation_(activation), weight_(std::move(weight)), bias_(std::move(bias))
{
	TOWER_CHECK(in_ > 0 && out_ > 0 && bias_.value.numel() == out_, "{} {} and {} {} are not a linear layer's [out, in] and [out]",
		    weight_.name, shape_text(weight_.value.shape()), bias_.name, shape_text(bias_.value.shape()));
}

const Tensor& Linear::forward(const Tensor& x)
{
	TOWER_CHECK(x.rank() == 2 && x.dim(1) == in_, "{} expects input [B, {}], got {}", weight_.name, in_,
		    shape_text(x.shape()));
	const Ops& ops = ops_for(x.device());
	x_ = x;
	// The input's type is the compute type: 16-bit layers work on rounded copies of the weights.
	w_ = working_value(weight_, x.dtype(), w_ws_);
	const Tensor b = working_value(bias_, x.dtype(), b_ws_);
	y_ = y_ws_.get({x.dim(0), out_}, x.dtype(), x.device());
	// W is [out, in]: the product reads it transposed in place and adds the bias before it writes
	// y (a ReLU follows in a pass of its own). GELU's input, or its slope, stays for the backward.
	if (activation_ != Activation::gelu) {
		ops.gemm_bias_act(Transpose::no, Transpose::yes, x, w_, b, activation_ == Activation::relu, y_);
		return y_;
	}
	z_ = z_ws_.get({x.dim(0), out_}, x.dtype(), x.device());
	ops.gemm_bias_act(Transpose::no, Transpose::yes, x, w_, b, false, z_);
	// Where the backend can, z_ then holds GELU's slope: the backward pass only multiplies by it.
	gelu_kept_ = ops.gelu_keeps_slope(x.dtype()) ? GeluKept::slope : GeluKept::input;
	if (gelu_kept_ == GeluKept::slope)
		ops.gelu_forward_slope(z_, y_);
	else
		ops.gelu_forward(z_, y_);
	return y_;
}

const Tensor& Linear::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(x_.data() != nullptr && dy.shape() == y_.shape(), "{}: backward of {} without a matching forward",
		    weight_.name, shape_text(dy.shape()));
	TOWER_CHECK(gelu_kept_ != GeluKept::spent,
		    "{}: a second backward pass after one forward: GELU's slope, kept from the forward, was used "
		    "up by the first (run forward again)",
		    weight_.name);
	const Ops& ops = ops_for(dy.device());
	const DType type = dy.dtype();
	const Tensor dz = bias_act_backward(ops, y_, z_, gelu_kept_, dy, activation_, bias_, 1, args, dz_ws_, db_ws_);
	if (gelu_kept_ == GeluKept::slope)
		gelu_kept_ = GeluKept::spent; // dz is written over it
	// A 16-bit weight gradient goes straight into the f32 Parameter::grad where the backend can
	// (no 16-bit buffer and no cast pass over the largest tensor of the step).
	if (type != DType::f32 && ops.gemm_into_f32(Transpose::yes, Transpose::no, 1.0f, dz, x_,
						     args.accumulate ? 1.0f : 0.0f, weight_.grad)) {
		notify_ready(args, weight_);
	} else {
		const Tensor dw = grad_buffer(weight_, type, dw_ws_);
		ops.gemm(Transpose::yes, Transpose::no, 1.0f, dz, x_, accumulate_in_place(dw, args) ? 1.0f : 0.0f, dw);
		finish_grad(weight_, dw, args);
	}
	dx_ = Tensor();
	if (args.need_input_grad) {
		dx_ = dx_ws_.get(x_.shape(), type, dy.device());
		ops.gemm(Transpose::no, Transpose::no, 1.0f, dz, w_, 0.0f, dx_);
	}
	return dx_;
}

} // namespace tower
