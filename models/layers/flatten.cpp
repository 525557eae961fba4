// Flattens [B, ...] into [B, features] without copying.
#include "models/layers/flatten.h"

#include "base/error.h"

namespace tower {

const Tensor& Flatten::forward(const Tensor& x)
{
	TOWER_CHECK(x.rank() >= 1, "flatten needs a batch dimension, got {}", shape_text(x.shape()));
	input_shape_ = x.shape();
	const int64_t batch = x.dim(0);
	y_ = x.reshaped({batch, batch > 0 ? x.numel() / batch : 0});
	return y_;
}

const Tensor& Flatten::backward(const Tensor& dy, const BackwardArgs& args)
{
	dx_ = args.need_input_grad ? dy.reshaped(input_shape_) : Tensor();
	return dx_;
}

} // namespace tower
