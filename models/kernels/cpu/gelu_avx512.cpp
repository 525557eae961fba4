// GELU and its gradient sixteen lanes at a time, with the hardware's reciprocal estimate.
//
// GELU is bound by arithmetic, not memory: on a Zen 5 the portable loop (vector_math.cpp) took
// 0.42-0.43 ns an element whether its operands were in L2 or in DRAM. A third of that was its division,
// tanh(u) = 1 - 2 / (e^{2|u|} + 1). Here GELU is written in its logistic form, x / (1 + e^{-2u})
// with u = sqrt(2/pi) (x + 0.044715 x^3) (the same function: 1 + tanh(u) = 2 / (1 + e^{-2u})), and
// the reciprocal is VRCP14PS's estimate (relative error below 2^-14) refined by one Newton step:
// 0.31 ns an element (the gradient 0.42 against 0.53), and within 6e-7 of float64 where the
// division's form was within 1.2e-5 (relative, on [-3, 3]). 2^n by VSCALEFPS and the constants
// folded then took it from 0.28 to 0.24 ns (the gradient from 0.39 to 0.33) in one test program
// over arrays in DRAM, where a plain copy takes 0.20; the float64 test's worst errors are 1.4e-7
// (value) and 1.8e-6 (slope).
#include "models/kernels/cpu/gelu_avx512.h"

#include "base/error.h"
#include "models/kernels/cpu/own_avx512.h"

// GCC's target pragma, as for attention_f32.cpp (clang ignores it: the fuzz build compiles this
// file with clang and runs the portable loops).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12's intrinsics pass an undefined vector through their unused mask lanes, which it then
// reports as a read of an uninitialized value (its bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace tower {

bool gelu_avx512_available()
{
	return own_avx512_allowed();
}

#pragma GCC push_options
#pragma GCC target("avx512f")

namespace {

constexpr float gelu_k = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float gelu_c = 0.044715f;
// e^-88 is 6e-39: where -2u >= 88 the logistic is taken as 0 (GELU's value and slope are then
// below 2e-36 in magnitude).
constexpr float zero_from = 88.0f;

inline __m512 splat(float v) { return _mm512_set1_ps(v); }

// e^x, the steps of vector_math.cpp's vector_exp: x = n ln2 + r, e^r by a degree-6 polynomial, then
// scaled by 2^n (VSCALEFPS, one instruction where the exponent bits took four). x is clamped below
// at -87.3 (a NaN becomes -87.3), not above: lanes at or past zero_from may come out huge, infinite
// or NaN, and the caller masks them.
inline __m512 exp16(__m512 x)
{
	x = _mm512_max_ps(x, splat(-87.3f));
	const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, splat(1.44269504088896341f)),
					      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, splat(0.693359375f), x);
	r = _mm512_fnmadd_ps(n, splat(-2.12194440e-4f), r);
	__m512 p = splat(1.9875691500e-4f);
	p = _mm512_fmadd_ps(p, r, splat(1.3981999507e-3f));
	p = _mm512_fmadd_ps(p, r, splat(8.3334519073e-3f));
	p = _mm512_fmadd_ps(p, r, splat(4.1665795894e-2f));
	p = _mm512_fmadd_ps(p, r, splat(1.6666665459e-1f));
	p = _mm512_fmadd_ps(p, r, splat(5.0000001201e-1f));
	p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), splat(1.0f));
	return _mm512_scalef_ps(p, n);
}

// s = 1 / (1 + e^{-2u}) at u = sqrt(2/pi) (v + 0.044715 v^3), and the lanes where e^{-2u} would
// pass e^88 (s is 0 there).
struct Logistic {
	__m512 s;
	__mmask16 zero;
};

inline Logistic logistic_of_gelu(__m512 v)
{
	// -2u = (-2 sqrt(2/pi) 0.044715) v^2 v + (-2 sqrt(2/pi)) v, the constants folded.
	const __m512 v2 = _mm512_mul_ps(v, v);
	const __m512 t = _mm512_fmadd_ps(_mm512_mul_ps(v2, splat(-2.0f * gelu_k * gelu_c)), v,
					 _mm512_mul_ps(v, splat(-2.0f * gelu_k)));
	const __m512 d = _mm512_add_ps(exp16(t), splat(1.0f));
	__m512 s = _mm512_rcp14_ps(d);
	s = _mm512_mul_ps(s, _mm512_fnmadd_ps(d, s, splat(2.0f)));
	const __mmask16 zero = _mm512_cmp_ps_mask(t, splat(zero_from), _CMP_GE_OQ);
	return {_mm512_mask_mov_ps(s, zero, _mm512_setzero_ps()), zero};
}

// Sixteen lanes from p, or the first `count` of them (the rest 0). Whole vectors are plain loads:
// masked ones from memory not in cache ran the loop at a third of its speed (Zen 5).
inline __m512 load(const float* p, int64_t count)
{
	return count >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1u), p);
}

inline void store(float* p, int64_t count, __m512 v)
{
	if (count >= 16)
		_mm512_storeu_ps(p, v);
	else
		_mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1u), v);
}

// GELU'(v) = s + 2 v s (1 - s) u'(v), u'(v) = sqrt(2/pi) (1 + 3 * 0.044715 v^2); 0 where s is.
inline __m512 slope_of_gelu(__m512 v, const Logistic& l)
{
	const __m512 du = _mm512_fmadd_ps(splat(3.0f * gelu_c), _mm512_mul_ps(v, v), splat(1.0f));
	const __m512 du2 = _mm512_mul_ps(splat(2.0f * gelu_k), du);
	const __m512 vss = _mm512_mul_ps(_mm512_mul_ps(v, l.s), _mm512_sub_ps(splat(1.0f), l.s));
	return _mm512_mask_mov_ps(_mm512_fmadd_ps(vss, du2, l.s), l.zero, _mm512_setzero_ps());
}

} // namespace

void gelu_f32_avx512(const float* __restrict x, float* __restrict y, int64_t n)
{
	for (int64_t i = 0; i < n; i += 16) {
		const __m512 v = load(x + i, n - i);
		store(y + i, n - i, _mm512_mul_ps(v, logistic_of_gelu(v).s));
	}
}

void gelu_backward_f32_avx512(const float* __restrict x, const float* __restrict dy, float* __restrict dx,
			      int64_t n)
{
	for (int64_t i = 0; i < n; i += 16) {
		const __m512 v = load(x + i, n - i);
		store(dx + i, n - i, _mm512_mul_ps(load(dy + i, n - i), slope_of_gelu(v, logistic_of_gelu(v))));
	}
}

// Each vector is loaded before anything is stored, so slope may be x itself.
void gelu_slope_f32_avx512(const float* x, float* __restrict y, float* slope, int64_t n)
{
	for (int64_t i = 0; i < n; i += 16) {
		const __m512 v = load(x + i, n - i);
		const Logistic l = logistic_of_gelu(v);
		store(y + i, n - i, _mm512_mul_ps(v, l.s));
		store(slope + i, n - i, slope_of_gelu(v, l));
	}
}

#pragma GCC pop_options

} // namespace tower

#else // not in this build: gelu_avx512_available() says so, and nothing calls these

namespace tower {

bool gelu_avx512_available()
{
	return false;
}

void gelu_f32_avx512(const float*, float*, int64_t)
{
	throw Error("the AVX-512 GELU is not in this build (it was not compiled by GCC for x86-64)");
}

void gelu_backward_f32_avx512(const float*, const float*, float*, int64_t)
{
	throw Error("the AVX-512 GELU is not in this build (it was not compiled by GCC for x86-64)");
}

void gelu_slope_f32_avx512(const float*, float*, float*, int64_t)
{
	throw Error("the AVX-512 GELU is not in this build (it was not compiled by GCC for x86-64)");
}

} // namespace tower

#endif
