// Chooses the CPU loop or the CUDA kernel by the device that holds the tensors.
#include "optim/update.h"

namespace tower {

void sgd_update(const Device& device, float* p, const float* g, int64_t n, const SgdCoeffs& c)
{
	if (device.is_cuda())
		sgd_update_cuda(p, g, n, c);
	else
		sgd_update_cpu(p, g, n, c);
}

void momentum_update(const Device& device, float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c)
{
	if (device.is_cuda())
		momentum_update_cuda(p, g, buf, n, c);
	else
		momentum_update_cpu(p, g, buf, n, c);
}

void adam_update(const Device& device, float* p, const float* g, float* m, float* v, int64_t n,
		 const int64_t* step, const AdamCoeffs& c)
{
	// The CUDA kernel reads the counter in device memory, so no step waits on a copy back.
	if (device.is_cuda())
		adam_update_cuda(p, g, m, v, n, step, c);
	else
		adam_update_cpu(p, g, m, v, n, *step, c);
}

void advance_step(const Device& device, int64_t* step)
{
	if (device.is_cuda())
		advance_step_cuda(step);
	else
		++*step;
}

} // namespace tower
