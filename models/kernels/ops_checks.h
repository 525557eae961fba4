// Shape, dtype and device checks shared by the backends of models/kernels/ops.h.
#pragma once

#include <cstdint>

#include "models/kernels/ops.h"

namespace tower {

// The row-major sizes of c[m, n] = op(a)[m, k] * op(b)[k, n].
struct GemmDims {
	int64_t m = 0;
	int64_t n = 0;
	int64_t k = 0;
};

// Throws tower::Error unless `t` is f32.
void expect_f32(const Tensor& t, const char* what);
// Throws unless `t` is one of the compute types f32, f16, bf16.
void expect_float(const Tensor& t, const char* what);
// Throws unless a and b have the same element type.
void expect_same_dtype(const Tensor& a, const Tensor& b, const char* what);
// Throws unless `t` lives on `device`.
void expect_on(const Tensor& t, const Device& device, const char* what);
// Throws unless a and b have the same element count.
void expect_same_numel(const Tensor& a, const Tensor& b, const char* what);

GemmDims checked_gemm_dims(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b, const Tensor& c);

// The number of channels bias_act / bias_grad spread over y's [outer, channels, inner] view.
int64_t checked_bias_outer(const Tensor& y, const Tensor& bias, int64_t inner);

// Checks x [N, C, H, W], y [N, C, H/2, W/2] and argmax (i32, y's shape) of 2x2 pooling.
void check_maxpool(const Tensor& x, const Tensor& y, const Tensor& argmax);

// Checks image [C, H, W] (or its element count) and col [C*k*k, OH*OW] against the geometry.
void check_im2col(const ConvGeometry& g, const Tensor& image, const Tensor& col);

// Checks logits [B, K], labels i32 [B] and probs (logits' shape).
void check_xent(const Tensor& logits, const Tensor& labels, const Tensor& probs);

} // namespace tower
