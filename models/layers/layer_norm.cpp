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

const Tensor& LayerNorm::forward(const Tensor& x)
{
	TOWER_CHECK(x.rank() == 2 && x.dim(1) == width_, "{} expects input [rows, {}], got {}", gain_.name, width_,
		    shape_text(x.shape()));
	x_ = x;
	y_ = y_ws_.get(x.shape(), x.dtype(), x.device());
	mean_ = mean_ws_.get({x.dim(0)}, DType::f32, x.device());
	rstd_ = rstd_ws_.get({x.dim(0)}, DType::f32, x.device());
	ops_for(x.device()).layernorm_forward(x, gain_.value, bias_.value, eps_, y_, mean_, rstd_);
	return y_;
}

const Tensor& LayerNorm::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(x_.data() != nullptr && dy.shape() == x_.shape(), "{}: backward of {} without a matching forward",
		    gain_.name, shape_text(dy.shape()));
	dx_ = dx_ws_.get(x_.shape(), x_.dtype(), x_.device());
	// The gain and bias gradients go straight into the f32 Parameter::grad (added to when the step
	// accumulates micro-batches).
	ops_for(dy.device()).layernorm_backward(dy, x_, gain_.value, mean_, rstd_, dx_, gain_.grad, bias_.grad,
						args.accumulate);
	notify_ready(args, bias_);
	notify_ready(args, gain_);
	return dx_;
}

} // namespace tower
