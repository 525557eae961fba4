// Conversions between f32 and the 16-bit float formats (IEEE f16 and bfloat16), round to nearest even.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tower {

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);

// Array forms, for the reduction loops that widen 16-bit data to f32 block by block.
void widen_f16(const uint16_t* in, float* out, size_t count);
void narrow_f16(const float* in, uint16_t* out, size_t count);
void widen_bf16(const uint16_t* in, float* out, size_t count);
void narrow_bf16(const float* in, uint16_t* out, size_t count);

// narrow_bf16 runs the CPU's own conversion (AVX512-BF16) where it has one, with the same bits as
// narrow_bf16_portable, the plain loop every CPU runs.
bool bf16_narrowing_is_native();
void narrow_bf16_portable(const float* in, uint16_t* out, size_t count);

} // namespace tower
