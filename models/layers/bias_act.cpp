// The bias-and-activation (ReLU or GELU) tail that Linear and Conv2d share, backward.
#include "models/layers/bias_act.h"

#include "models/layers/precision.h"

namespace tower {

Tensor bias_act_backward(const Ops& ops, const Tensor& y, const Tensor& z, GeluKept kept, const Tensor& dy,
			 Activation activation, const Parameter& bias, int64_t positions, const BackwardArgs& args,
			 Workspace& dz_ws, Workspace& db_ws)
{
	const DType type = dy.dtype();
	const Tensor db = grad_buffer(bias, type, db_ws);
	Tensor dz = dy;
	if (activation == Activation::gelu) {
		// The slope is read once, so dz takes its place: its lines are in cache as they are read
		// (a buffer of its own would first be fetched from memory to be written).
		if (kept == GeluKept::slope) {
			dz = z;
			ops.slope_backward_bias_grad(z, dy, dz, db, accumulate_in_place(db, args));
		} else {
			dz = dz_ws.get(dy.shape(), type, dy.device());
			ops.gelu_backward_bias_grad(z, dy, dz, db, accumulate_in_place(db, args));
		}
		finish_grad(bias, db, args);
		return dz;
	}
	if (activation == Activation::relu) {
		dz = dz_ws.get(dy.shape(), type, dy.device());
		ops.relu_backward(y, dy, dz);
	}
	ops.bias_grad(dz, db, positions, accumulate_in_place(db, args));
	finish_grad(bias, db, args);
	return dz;
}

} // namespace tower
