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

// Checks images [n, C, H, W] (or their element count) and col [C*k*k, n * OH*OW] against the geometry.
void check_im2col(const ConvGeometry& g, const Tensor& image, const Tensor& col);

// Checks logits [B, K], labels i32 [B] and probs (logits' shape).
void check_xent(const Tensor& logits, const Tensor& labels, const Tensor& probs);

// The sizes of batched c[i] = op(a[i]) op(b[i]) for 3-D tensors, and their batch count.
struct BatchedGemmDims : GemmDims {
	int64_t batch = 0;
};
BatchedGemmDims checked_batched_gemm_dims(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b,
					  const Tensor& c);

// The sizes of strided batched c[i] = op(a[i]) op(b[i]) over MatrixBatch views: one batch count and
// element type, fitting shapes, every view inside its tensor, c's matrices apart.
GemmDims checked_strided_gemm_dims(Transpose ta, Transpose tb, const MatrixBatch& a, const MatrixBatch& b,
				   const MatrixBatch& c);

// LayerNorm: x and y [rows, C] of one compute type, gamma and beta f32 [C], mean and rstd f32
// [rows]; returns the row count.
int64_t check_layernorm(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& mean,
			const Tensor& rstd);

// LayerNorm backward: dy and dx like x, and the gain's and bias's gradients f32 [C]; returns the
// row count.
int64_t check_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
				 const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta);

// Causal softmax: scores and probs [N, T, T] of one compute type.
void check_causal_softmax(const Tensor& scores, const Tensor& probs);

// Causal attention's operands: qkv [B * T, 3 * heads * D], probs [B * heads, T, T] and out (y or
// dy) [B * T, heads * D], all of one float type. Returns T and D.
struct AttentionDims {
	int64_t time, d;
};
AttentionDims check_causal_attention(const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& probs,
				     const Tensor& out);

// Heads [B, H, T, D] against rows [B, T, W] with columns offset .. offset + H * D.
void check_permute_heads(const Tensor& rows, int64_t offset, const Tensor& heads);

// Windows i32 [B, T + 1], inputs and targets i32 [B * T].
void check_split_windows(const Tensor& windows, const Tensor& inputs, const Tensor& targets);

// Embedding: i32 tokens [N], table [V, C], out [N, C]; `table_f32` for the backward's f32 table.
void check_embedding(const Tensor& tokens, const Tensor& table, const Tensor& out, bool table_f32);

} // namespace tower
