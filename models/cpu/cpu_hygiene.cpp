// Gradient hygiene on the CPU: the finiteness check, the sum of squares and in-place scaling.
#include <cfloat>
#include <cmath>

#include "models/cpu/cpu_ops.h"
#include "models/ops_checks.h"

namespace tower {

bool CpuOps::all_finite(const Tensor& x) const
{
	expect_f32(x, "checked gradient");
	const float* __restrict v = x.data_as<float>();
	const int64_t n = x.numel();
	// No early exit and no branch: the loop vectorizes, and overflow is rare enough that
	// scanning to the end costs nothing extra in the common case. NaN fails the comparison.
	int bad = 0;
	for (int64_t i = 0; i < n; ++i)
		bad |= !(std::fabs(v[i]) <= FLT_MAX);
	return bad == 0;
}

double CpuOps::sum_of_squares(const Tensor& x) const
{
	expect_f32(x, "gradient");
	const float* __restrict v = x.data_as<float>();
	const int64_t n = x.numel();
	// Four partial sums in f64 break the dependency chain without changing the result's accuracy.
	double s[4] = {0.0, 0.0, 0.0, 0.0};
	int64_t i = 0;
	for (; i + 4 <= n; i += 4)
		for (int64_t j = 0; j < 4; ++j)
			s[j] += static_cast<double>(v[i + j]) * v[i + j];
	for (; i < n; ++i)
		s[0] += static_cast<double>(v[i]) * v[i];
	return (s[0] + s[1]) + (s[2] + s[3]);
}

void CpuOps::scale(const Tensor& x, float factor) const
{
	expect_f32(x, "scaled tensor");
	float* __restrict v = x.data_as<float>();
	const int64_t n = x.numel();
	for (int64_t i = 0; i < n; ++i)
		v[i] *= factor;
}

} // namespace tower
