// Conversions between f32 and the 16-bit float formats (IEEE f16 and bfloat16), round to nearest even.
#include "base/tensor/half.h"

#if defined(__F16C__) || defined(__x86_64__)
#include <immintrin.h>
#endif

#include <bit>

namespace tower {

// With F16C the scalar conversions are its instructions (clang before 15 has no _Float16 on x86,
// and the fuzzing build uses clang 14); otherwise _Float16, the compiler's IEEE binary16. Both are
// exact from f16 and round to nearest even into it.
float f16_to_f32(uint16_t bits)
{
#if defined(__F16C__)
	return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
#else
	return static_cast<float>(std::bit_cast<_Float16>(bits));
#endif
}

uint16_t f32_to_f16(float value)
{
#if defined(__F16C__)
	return static_cast<uint16_t>(
		_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(value), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0));
#else
	return std::bit_cast<uint16_t>(static_cast<_Float16>(value));
#endif
}

namespace {

// The bf16 conversions, inline so the loops below vectorize: calls to the exported functions of
// a shared library are not inlined (they could be interposed), and a loop of calls stays scalar.
inline float bf16_bits_to_f32(uint16_t bits)
{
	return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t f32_to_bf16_bits(float value)
{
	const uint32_t u = std::bit_cast<uint32_t>(value);
	// Round to nearest, ties to even, by adding half an ulp of the kept part; a NaN stays a
	// (quiet) NaN. Both are computed and one is picked, which vectorizes.
	const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	const uint32_t nan = (u >> 16) | 0x40u;
	return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

} // namespace

float bf16_to_f32(uint16_t bits)
{
	return bf16_bits_to_f32(bits);
}

uint16_t f32_to_bf16(float value)
{
	return f32_to_bf16_bits(value);
}

// With F16C (part of x86-64-v3, the default -Dcpu_arch) the conversions are one instruction per
// eight values, with the same round-to-nearest-even results as the scalar forms above; without
// it the scalar forms do all the work.
void widen_f16(const uint16_t* in, float* out, size_t count)
{
	size_t i = 0;
#if defined(__F16C__)
	for (; i + 8 <= count; i += 8)
		_mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
#endif
	for (; i < count; ++i)
		out[i] = f16_to_f32(in[i]);
}

void narrow_f16(const float* in, uint16_t* out, size_t count)
{
	size_t i = 0;
#if defined(__F16C__)
	for (; i + 8 <= count; i += 8)
		_mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
	for (; i < count; ++i)
		out[i] = f32_to_f16(in[i]);
}

void widen_bf16(const uint16_t* in, float* out, size_t count)
{
	for (size_t i = 0; i < count; ++i)
		out[i] = bf16_bits_to_f32(in[i]);
}

void narrow_bf16_portable(const float* in, uint16_t* out, size_t count)
{
	for (size_t i = 0; i < count; ++i)
		out[i] = f32_to_bf16_bits(in[i]);
}

#if defined(__x86_64__)

namespace {

// AVX512-BF16 rounds sixteen values to nearest even in one instruction (the portable loop takes
// about nine times as long on data in cache). The instruction flushes subnormal inputs to zero,
// which the portable form keeps; a block holding one goes through that form, so every CPU gives
// the same bits.
__attribute__((target("avx512f,avx512bf16"))) void narrow_bf16_avx512(const float* in, uint16_t* out, size_t count)
{
	const __m512i exponent = _mm512_set1_epi32(0x7f800000), fraction = _mm512_set1_epi32(0x007fffff);
	size_t i = 0;
	for (; i + 16 <= count; i += 16) {
		const __m512 x = _mm512_loadu_ps(in + i);
		const __m512i bits = _mm512_castps_si512(x);
		const __mmask16 subnormal = _mm512_testn_epi32_mask(bits, exponent) & _mm512_test_epi32_mask(bits, fraction);
		if (subnormal) {
			for (size_t k = i; k < i + 16; ++k)
				out[k] = f32_to_bf16_bits(in[k]);
			continue;
		}
		_mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
	}
	for (; i < count; ++i)
		out[i] = f32_to_bf16_bits(in[i]);
}

} // namespace

bool bf16_narrowing_is_native()
{
	static const bool native = __builtin_cpu_supports("avx512bf16");
	return native;
}

void narrow_bf16(const float* in, uint16_t* out, size_t count)
{
	if (bf16_narrowing_is_native())
		return narrow_bf16_avx512(in, out, count);
	narrow_bf16_portable(in, out, count);
}

#else

bool bf16_narrowing_is_native()
{
	return false;
}

void narrow_bf16(const float* in, uint16_t* out, size_t count)
{
	narrow_bf16_portable(in, out, count);
}

#endif

} // namespace tower
