// Gradient hygiene on the CPU: the finiteness check, the sum of squares and in-place scaling.
#include <cfloat>
#include <cmath>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/ops_checks.h"

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
	// Sixteen partial sums in f64 (four vectors of four) break the dependency chain of the adds
	// without changing the result's accuracy: with one vector the loop ran at the adds' latency,
	// not at memory speed.
	constexpr int64_t lanes = 16;
	double s[lanes] = {};
	int64_t i = 0;
	for (; i + lanes <= n; i += lanes)
		for (int64_t j = 0; j < lanes; ++j)
			s[j] += static_cast<double>(v[i + j]) * v[i + j];
	for (; i < n; ++i)
		s[0] += static_cast<double>(v[i]) * v[i];
	for (int64_t width = lanes / 2; width > 0; width /= 2)
		for (int64_t j = 0; j < width; ++j)
			s[j] += s[j + width];
	return s[0];
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
