// Loops over f32 arrays that call exp, written and compiled so that GCC vectorizes them.
#include "models/kernels/cpu/vector_math.h"

#include "models/kernels/cpu/gelu_avx512.h"

// GCC if-converts the clamps below into vector min/max only when it may assume floating-point
// comparisons raise no exception that a program could observe; the results are the same bits.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tower {

namespace {

// e^x within 2 ulp of libm: x = n ln2 + r with |r| <= ln2 / 2, e^r by Cephes' degree-6
// polynomial, 2^n put into the exponent bits. x is clamped to [-87.3, 88]: e^-87.3 is 1.2e-38
// rather than 0, and no result is inf.
inline float vector_exp(float x)
{
	x = std::min(std::max(x, -87.3f), 88.0f);
	// n = round(x / ln2), by the add-and-subtract trick, which vectorizes where rint() may not.
	const float shifter = 12582912.0f; // 1.5 * 2^23
	const float n = (x * 1.44269504088896341f + shifter) - shifter;
	// r = x - n ln2 in two parts, so r keeps its low bits.
	float r = x - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
	float scale;
	std::memcpy(&scale, &bits, sizeof scale);
	return p * scale;
}

// tanh(u) = 1 - 2 / (e^{2|u|} + 1) with u's sign. |u| is capped at 40, where the formula gives
// exactly +-1 in float (at 9 it would still give 1 - 6e-8, and GELU(-1e30) would be -3e22, not 0).
inline float vector_tanh(float u)
{
	const float a = std::min(std::fabs(u), 40.0f);
	return std::copysign(1.0f - 2.0f / (vector_exp(2.0f * a) + 1.0f), u);
}

constexpr float gelu_k = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float gelu_c = 0.044715f;

// GELU'(v) given t = tanh(sqrt(2/pi) (v + 0.044715 v^3)): one expression for the backward pass
// and for gelu_slope_f32, so that both round it alike.
inline float gelu_slope(float v, float t)
{
	return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * gelu_k * (1.0f + 3.0f * gelu_c * v * v);
}

} // namespace

// These loops are bound by arithmetic (the exp polynomial and a division per element), so they
// are also compiled for AVX-512, picked at load time where the CPU has it: 16 lanes instead of 8.
// Each element goes through the same operations at either width, so the bits are the same.
// Only where the default build has FMA already (-Dcpu_arch=x86-64-v3, the default): the AVX-512
// clone fuses multiply-adds, and a default clone without FMA would round them apart.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__FMA__)
#define TOWER_WIDE_CLONES __attribute__((target_clones("avx512f", "default")))
#else
#define TOWER_WIDE_CLONES
#endif

TOWER_WIDE_CLONES void gelu_f32(const float* __restrict x, float* __restrict y, int64_t n)
{
	if (gelu_avx512_available())
		return gelu_f32_avx512(x, y, n);
	for (int64_t i = 0; i < n; ++i) {
		const float v = x[i];
		y[i] = 0.5f * v * (1.0f + vector_tanh(gelu_k * (v + gelu_c * v * v * v)));
	}
}

TOWER_WIDE_CLONES void gelu_backward_f32(const float* __restrict x, const float* __restrict dy, float* __restrict dx, int64_t n)
{
	if (gelu_avx512_available())
		return gelu_backward_f32_avx512(x, dy, dx, n);
	for (int64_t i = 0; i < n; ++i) {
		const float v = x[i];
		const float t = vector_tanh(gelu_k * (v + gelu_c * v * v * v));
		dx[i] = dy[i] * gelu_slope(v, t);
	}
}

TOWER_WIDE_CLONES void gelu_slope_f32(const float* x, float* __restrict y, float* slope, int64_t n)
{
	if (gelu_avx512_available())
		return gelu_slope_f32_avx512(x, y, slope, n);
	for (int64_t i = 0; i < n; ++i) {
		const float v = x[i];
		const float t = vector_tanh(gelu_k * (v + gelu_c * v * v * v));
		y[i] = 0.5f * v * (1.0f + t);
		slope[i] = gelu_slope(v, t);
	}
}

TOWER_WIDE_CLONES void exp_shifted_f32(const float* __restrict x, float shift, float scale, float* __restrict y, int64_t n)
{
	for (int64_t i = 0; i < n; ++i)
		y[i] = vector_exp(scale * (x[i] - shift));
}

// Sixteen running maxima, folded at the end. GCC keeps them as sixteen scalars (vmaxss), but no
// maximum waits on another: one instruction per element, where one running maximum would wait on
// each comparison.
TOWER_WIDE_CLONES float max_f32(const float* __restrict x, int64_t n)
{
	constexpr int64_t lanes = 16;
	float m[lanes];
	for (int64_t j = 0; j < lanes; ++j)
		m[j] = x[0];
	int64_t i = 0;
	for (; i + lanes <= n; i += lanes)
		for (int64_t j = 0; j < lanes; ++j)
			m[j] = m[j] < x[i + j] ? x[i + j] : m[j];
	for (; i < n; ++i)
		m[0] = m[0] < x[i] ? x[i] : m[0];
	for (int64_t j = 1; j < lanes; ++j)
		m[0] = m[0] < m[j] ? m[j] : m[0];
	return m[0];
}

} // namespace tower
