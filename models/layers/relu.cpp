// Elementwise max(0, x) as a layer of its own (Linear and Conv2d can also fuse it).
#include "models/layers/relu.h"

#include "models/kernels/ops.h"
#include "base/error.h"

namespace tower {

const Tensor& ReLU::forward(const Tensor& x)
{
	y_ = y_ws_.get(x.shape(), x.dtype(), x.device());
	ops_for(x.device()).relu_forward(x, y_);
	return y_;
}

const Tensor& ReLU::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(dy.shape() == y_.shape(), "relu: backward of {} after a forward of {}", shape_text(dy.shape()),
		    shape_text(y_.shape()));
	dx_ = Tensor();
	if (args.need_input_grad) {
		dx_ = dx_ws_.get(dy.shape(), dy.dtype(), dy.device());
		ops_for(dy.device()).relu_backward(y_, dy, dx_);
	}
	return dx_;
}

} // namespace tower
