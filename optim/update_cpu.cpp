// The update formulas as plain loops over host memory, simple enough for the compiler to vectorize.
#include "optim/update.h"

namespace tower {

void sgd_update_cpu(float* __restrict p, const float* __restrict g, int64_t n, const SgdCoeffs& c)
{
	const SgdCoeffs k = c;
	for (int64_t i = 0; i < n; ++i)
		sgd_rule(p[i], g[i], k);
}

void momentum_update_cpu(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
			 const SgdCoeffs& c)
{
	const SgdCoeffs k = c;
	for (int64_t i = 0; i < n; ++i)
		momentum_rule(p[i], g[i], buf[i], k);
}

void adam_update_cpu(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
		     int64_t n, int64_t step, const AdamCoeffs& c)
{
	const AdamCoeffs k = c;
	if (k.pytorch_form) {
		const PytorchAdamStep s = pytorch_adam_step(k, step);
		for (int64_t i = 0; i < n; ++i)
			pytorch_adam_rule(p[i], g[i], m[i], v[i], k, s);
		return;
	}
	const float step_size = adam_step_size(k, step);
	for (int64_t i = 0; i < n; ++i)
		adam_rule(p[i], g[i], m[i], v[i], k, step_size);
}

} // namespace tower
