// The CPU backend's setup, the choice of backend by device, and the device-neutral entry points.
#include "models/kernels/cpu/cpu_ops.h"

namespace tower {

const Ops& cpu_ops()
{
	static const CpuOps ops;
	return ops;
}

const Ops& ops_for(const Device& device)
{
	return device.is_cuda() ? cuda_ops(device.index) : cpu_ops();
}

bool all_finite(const Tensor& x)
{
	return ops_for(x.device()).all_finite(x);
}

double sum_of_squares(const Tensor& x)
{
	return ops_for(x.device()).sum_of_squares(x);
}

double Ops::sum_of_squares_all(const std::vector<Tensor>& xs) const
{
	double total = 0;
	for (const Tensor& x : xs)
		total += sum_of_squares(x);
	return total;
}

double sum_of_squares_all(const std::vector<Tensor>& xs)
{
	return xs.empty() ? 0.0 : ops_for(xs.front().device()).sum_of_squares_all(xs);
}

void scale(const Tensor& x, float factor)
{
	ops_for(x.device()).scale(x, factor);
}

} // namespace tower
