// The GELU activation (tanh form, GPT-2's) of a transformer's MLP.
#include "models/layers/gelu.h"

#include "models/kernels/ops.h"
#include "base/error.h"

namespace tower {

const Tensor& Gelu::forward(const Tensor& x)
{
	x_ = x;
	y_ = y_ws_.get(x.shape(), x.dtype(), x.device());
	ops_for(x.device()).gelu_forward(x, y_);
	return y_;
}

const Tensor& Gelu::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(x_.data() != nullptr && dy.shape() == x_.shape(), "gelu: backward of {} without a matching forward",
		    shape_text(dy.shape()));
	dx_ = Tensor();
	if (args.need_input_grad) {
		dx_ = dx_ws_.get(x_.shape(), x_.dtype(), x_.device());
		ops_for(dy.device()).gelu_backward(x_, dy, dx_);
	}
	return dx_;
}

} // namespace tower
