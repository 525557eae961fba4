// Loops over f32 arrays that call exp, written and compiled so that GCC vectorizes them (libm's expf
// and tanhf are scalar calls: tanhf alone took a quarter of a GPT step on Zen 3, measured with perf).
#pragma once

#include <cstdint>

namespace tower {

// y = GELU(x), tanh form; dx = dy * GELU'(x).
void gelu_f32(const float* x, float* y, int64_t n);
void gelu_backward_f32(const float* x, const float* dy, float* dx, int64_t n);
// y[i] = e^(scale * (x[i] - shift)); scale * (x[i] - shift) must be <= 0 (a softmax row's maximum
// subtracted).
void exp_shifted_f32(const float* x, float shift, float scale, float* y, int64_t n);

} // namespace tower
