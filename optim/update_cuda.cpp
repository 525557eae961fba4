// The CUDA update entry points: launch the kernels and turn a failed launch into tower::Error.
#include "optim/update.h"
#include "optim/update_kernels_cuda.h"
#include "base/device/cuda_check.h"

namespace tower {

void sgd_update_cuda(float* p, const float* g, int64_t n, const SgdCoeffs& c)
{
	if (n > 0)
		TOWER_CUDA(launch_sgd_update(p, g, n, c));
}

void momentum_update_cuda(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c)
{
	if (n > 0)
		TOWER_CUDA(launch_momentum_update(p, g, buf, n, c));
}

void adam_update_cuda(float* p, const float* g, float* m, float* v, int64_t n, const int64_t* step, const AdamCoeffs& c)
{
	if (n > 0)
		TOWER_CUDA(launch_adam_update(p, g, m, v, n, step, c));
}

void advance_step_cuda(int64_t* step)
{
	TOWER_CUDA(launch_advance_step(step));
}

} // namespace tower
