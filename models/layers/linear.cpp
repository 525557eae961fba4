// Fully connected layer y = x W^T + b, optionally followed by a fused ReLU.
#include "models/layers/linear.h"

#include "models/init.h"
#include "models/ops.h"
#include "runtime/error.h"

namespace tower {

Linear::Linear(const std::string& name, int64_t in, int64_t out, Activation activation, uint64_t seed,
	       const Device& device)
	: in_(in), out_(out), activation_(activation),
	  weight_(make_weight(name + ".weight", {out, in}, in, seed, device)),
	  bias_(make_bias(name + ".bias", out, in, seed, device))
{
}

const Tensor& Linear::forward(const Tensor& x)
{
	TOWER_CHECK(x.rank() == 2 && x.dim(1) == in_, "{} expects input [B, {}], got {}", weight_.name, in_,
		    shape_text(x.shape()));
	const Ops& ops = ops_for(x.device());
	x_ = x;
	y_ = y_ws_.get({x.dim(0), out_}, DType::f32, x.device());
	// W is [out, in]: sgemm reads it transposed in place.
	ops.gemm(Transpose::no, Transpose::yes, 1.0f, x, weight_.value, 0.0f, y_);
	// Bias and ReLU in one pass over the output.
	ops.bias_act(y_, bias_.value, 1, activation_ == Activation::relu);
	return y_;
}

const Tensor& Linear::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(x_.data() != nullptr && dy.shape() == y_.shape(), "{}: backward of {} without a matching forward",
		    weight_.name, shape_text(dy.shape()));
	const Ops& ops = ops_for(dy.device());
	Tensor dz = dy;
	if (activation_ == Activation::relu) {
		dz = dz_ws_.get(dy.shape(), DType::f32, dy.device());
		ops.relu_backward(y_, dy, dz);
	}
	const float beta = args.accumulate ? 1.0f : 0.0f;
	ops.bias_grad(dz, bias_.grad, 1, args.accumulate);
	notify_ready(args, bias_);
	ops.gemm(Transpose::yes, Transpose::no, 1.0f, dz, x_, beta, weight_.grad);
	notify_ready(args, weight_);
	dx_ = Tensor();
	if (args.need_input_grad) {
		dx_ = dx_ws_.get(x_.shape(), DType::f32, dy.device());
		ops.gemm(Transpose::no, Transpose::no, 1.0f, dz, weight_.value, 0.0f, dx_);
	}
	return dx_;
}

} // namespace tower
