// 2x2 max pooling with stride 2.
#include "models/layers/maxpool2d.h"

#include "models/kernels/ops.h"
#include "base/error.h"

namespace tower {

const Tensor& MaxPool2d::forward(const Tensor& x)
{
	TOWER_CHECK(x.rank() == 4, "max pooling expects [B, C, H, W], got {}", shape_text(x.shape()));
	input_shape_ = x.shape();
	const Shape out = {x.dim(0), x.dim(1), x.dim(2) / 2, x.dim(3) / 2};
	y_ = y_ws_.get(out, x.dtype(), x.device());
	argmax_ = argmax_ws_.get(out, DType::i32, x.device());
	ops_for(x.device()).maxpool_forward(x, y_, argmax_);
	return y_;
}

const Tensor& MaxPool2d::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(dy.shape() == y_.shape(), "max pooling: backward of {} after a forward of {}",
		    shape_text(dy.shape()), shape_text(y_.shape()));
	dx_ = Tensor();
	if (args.need_input_grad) {
		dx_ = dx_ws_.get(input_shape_, dy.dtype(), dy.device());
		ops_for(dy.device()).maxpool_backward(dy, argmax_, dx_);
	}
	return dx_;
}

} // namespace tower
