// GELU (tanh form) and its gradient on AVX-512: gelu_f32's path where the build and CPU allow.
#pragma once

#include <cstdint>

namespace tower {

// Whether this build (GCC on x86-64) and CPU (own_avx512_allowed()) run the two below.
bool gelu_avx512_available();

// y = GELU(x) (within 6e-7 of float64, relative); dx = dy * GELU'(x).
void gelu_f32_avx512(const float* x, float* y, int64_t n);
void gelu_backward_f32_avx512(const float* x, const float* dy, float* dx, int64_t n);
// y = GELU(x) and slope = GELU'(x), the slope's bits those gelu_backward_f32_avx512 multiplies dy
// by; slope may be x itself.
void gelu_slope_f32_avx512(const float* x, float* y, float* slope, int64_t n);

} // namespace tower
