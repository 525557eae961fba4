// Mixed precision inside a layer: low-precision working copies of the f32 master weights, and
// parameter gradients computed in the low type and cast into the f32 Parameter::grad.
#include "models/layers/precision.h"

#include "models/kernels/ops.h"

namespace tower {

Tensor working_value(const Parameter& p, DType dtype, Workspace& ws)
{
	if (dtype == p.value.dtype())
		return p.value;
	if (p.working.data() != nullptr && p.working.dtype() == dtype)
		return p.working;
	const Tensor& copy = ws.get(p.value.shape(), dtype, p.value.device());
	ops_for(copy.device()).cast(p.value, copy, false);
	return copy;
}

Tensor grad_buffer(const Parameter& p, DType dtype, Workspace& ws)
{
	if (dtype == p.grad.dtype())
		return p.grad;
	return ws.get(p.grad.shape(), dtype, p.grad.device());
}

bool accumulate_in_place(const Tensor& buffer, const BackwardArgs& args)
{
	return args.accumulate && buffer.dtype() == DType::f32;
}

void finish_grad(const Parameter& p, const Tensor& buffer, const BackwardArgs& args)
{
	if (buffer.data() != p.grad.data())
		ops_for(p.grad.device()).cast(buffer, p.grad, args.accumulate);
	notify_ready(args, p);
}

} // namespace tower
