// Conversions between f32 and the 16-bit float formats (IEEE f16 and bfloat16), round to nearest even.
#include "runtime/base/half.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <bit>

namespace tower {

float f16_to_f32(uint16_t bits)
{
	// _Float16 is the compiler's IEEE binary16; the conversion is exact in this direction.
	return static_cast<float>(std::bit_cast<_Float16>(bits));
}

uint16_t f32_to_f16(float value)
{
	return std::bit_cast<uint16_t>(static_cast<_Float16>(value));
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

void narrow_bf16(const float* in, uint16_t* out, size_t count)
{
	for (size_t i = 0; i < count; ++i)
		out[i] = f32_to_bf16_bits(in[i]);
}

} // namespace tower
