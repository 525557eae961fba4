// LayerNorm over the last dimension, with a learned gain and bias kept (and differentiated) in f32.
#include "models/layers/layer_norm.h"

#include "models/init.h"
#include "models/kernels/ops.h"
#include "base/error.h"

namespace tower {

LayerNorm::LayerNorm(const std::string& name, int64_t width, const Device& device, float eps)
	: width_(width), eps_(eps), gain_(make_constant(name + ".weight", {width}, 1.0f, device)),
	  bias_(make_constant(name + ".bias", {width}, 0.0f, device))
{
}

void LayerNorm::expect_input(const Tensor& x) const
{
	TOWER_CHECK(x.rank() == 2 && x.dim(1) == width_, "{} expects input [rows, {}], got {}", gain_.name, width_,
		    shape_text(x.shape()));
}

void LayerNorm::prepare_forward(const Tensor& x)
{
	x_ = x;
	y_ = y_ws_.get(x.shape(), x.dtype(), x.device());
	mean_ = mean_ws_.get({x.dim(0)}, DType::f32, x.device());
	rstd_ = rstd_ws_.get({x.dim(0)}, DType::f32, x.device());
}

const Tensor& LayerNorm::forward(const Tensor& x)
{
	expect_input(x);
	prepare_forward(x);
	ops_for(x.device()).layernorm_forward(x, gain_.value, bias_.value, eps_, y_, mean_, rstd_);
	return y_;
}

const Tensor& LayerNorm::forward_add(const Tensor& a, const Tensor& b)
{
	expect_input(a);
	prepare_forward(a);
	ops_for(a.device()).add_layernorm_forward(a, b, gain_.value, bias_.value, eps_, a, y_, mean_, rstd_);
	return y_;
}

void LayerNorm::prepare_backward(const Tensor& dy)
{
	TOWER_CHECK(x_.data() != nullptr && dy.shape() == x_.shape(), "{}: backward of {} without a matching forward",
		    gain_.name, shape_text(dy.shape()));
	dx_ = dx_ws_.get(x_.shape(), x_.dtype(), x_.device());
}

// The gain and bias gradients go straight into the f32 Parameter::grad (added to when the step
// accumulates micro-batches).
void LayerNorm::notify_grads(const BackwardArgs& args)
{
	notify_ready(args, bias_);
	notify_ready(args, gain_);
}

const Tensor& LayerNorm::backward(const Tensor& dy, const BackwardArgs& args)
{
	prepare_backward(dy);
	ops_for(dy.device()).layernorm_backward(dy, x_, gain_.value, mean_, rstd_, dx_, gain_.grad, bias_.grad,
						args.accumulate);
	notify_grads(args);
	return dx_;
}

const Tensor& LayerNorm::backward_add(const Tensor& dy, const Tensor& residual, const BackwardArgs& args)
{
	prepare_backward(dy);
	ops_for(dy.device()).layernorm_backward_add(dy, x_, gain_.value, mean_, rstd_, residual, dx_, gain_.grad,
						    bias_.grad, args.accumulate);
	notify_grads(args);
	return dx_;
}

} // namespace tower
