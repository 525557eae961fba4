// Loops over f32 arrays that call exp, written and compiled so that GCC vectorizes them (libm's expf
// and tanhf are scalar calls: tanhf alone took a quarter of a GPT step on Zen 3, measured with perf),
// and sums and maxima in sixteen lanes.
#pragma once

#include <cstdint>

namespace tower {

// y = GELU(x), tanh form; dx = dy * GELU'(x). Where gelu_avx512_available(), by gelu_avx512.cpp's
// loops (the logistic form, no division: other bits than the loops here).
void gelu_f32(const float* x, float* y, int64_t n);
void gelu_backward_f32(const float* x, const float* dy, float* dx, int64_t n);
// y = GELU(x) and slope = GELU'(x), the very value gelu_backward_f32 multiplies dy by, so that
// dy * slope has its bits; slope may be x itself.
void gelu_slope_f32(const float* x, float* y, float* slope, int64_t n);
// y[i] = e^(scale * (x[i] - shift)); scale * (x[i] - shift) must be <= 0 (a softmax row's maximum
// subtracted).
void exp_shifted_f32(const float* x, float shift, float scale, float* y, int64_t n);
// The maximum of x[0 .. n), n >= 1, in sixteen running maxima. A NaN after x[0] is passed over
// (as std::max(m, v) passes over a NaN v); a NaN x[0] is the result.
float max_f32(const float* x, int64_t n);

// The sum of term(0) .. term(n - 1) in sixteen partial sums (two vectors of eight), added pairwise
// at the end: one running sum would run at the latency of a chain of f32 adds and keep the loop
// scalar (GCC may not reorder float additions). The order is fixed, so the bits are too.
template <class Term>
inline float lane_sum(int64_t n, Term&& term)
{
	constexpr int64_t lanes = 16;
	float s[lanes] = {};
	int64_t i = 0;
	for (; i + lanes <= n; i += lanes)
		for (int64_t j = 0; j < lanes; ++j)
			s[j] += term(i + j);
	for (; i < n; ++i)
		s[0] += term(i);
	for (int64_t width = lanes / 2; width > 0; width /= 2)
		for (int64_t j = 0; j < width; ++j)
			s[j] += s[j + width];
	return s[0];
}

} // namespace tower
