// Loops over f32 arrays that call exp, written and compiled so that GCC vectorizes them (libm's expf
// and tanhf are scalar calls: tanhf alone took a quarter of a GPT step on Zen 3, measured with perf),
// and sums and maxima in sixteen lanes.
#pragma once

#include <cstdint>
#include <cstring>

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

// Sixteen partial sums s[0 .. 16) added pairwise (s[j] += s[j + width], width 8, 4, 2, 1), with
// `first` in place of s[0] (lane 0 plus a tail's terms, added in a register). The fold runs in
// registers: written into s[0] in memory and read back inside a vector, it waited on a failed
// store forwarding (a quarter of the attention forward's own time, perf annotate, Zen 5).
inline float fold_lanes(const float* s, float first)
{
	using f32x8 = float __attribute__((vector_size(32)));
	using f32x4 = float __attribute__((vector_size(16)));
	f32x8 low, high;
	std::memcpy(&low, s, sizeof low);
	std::memcpy(&high, s + 8, sizeof high);
	low[0] = first;
	const f32x8 eight = low + high;
	const f32x4 four = __builtin_shufflevector(eight, eight, 0, 1, 2, 3) + __builtin_shufflevector(eight, eight, 4, 5, 6, 7);
	return (four[0] + four[2]) + (four[1] + four[3]);
}

// The sum of term(0) .. term(n - 1) in sixteen partial sums (two vectors of eight), added pairwise
// at the end: one running sum would run at the latency of a chain of f32 adds and keep the loop
// scalar (GCC may not reorder float additions). The order is fixed, so the bits are too: the
// terms after the last whole sixteen go to lane 0, then fold_lanes.
template <class Term>
inline float lane_sum(int64_t n, Term&& term)
{
	constexpr int64_t lanes = 16;
	float s[lanes] = {};
	int64_t i = 0;
	for (; i + lanes <= n; i += lanes)
		for (int64_t j = 0; j < lanes; ++j)
			s[j] += term(i + j);
	float first = s[0];
	for (; i < n; ++i)
		first += term(i);
	return fold_lanes(s, first);
}

} // namespace tower
