// Launchers of tower's CUDA kernels (models/kernels/cuda/*.cu); all run on the calling thread's stream
// (base/device/thread_stream.h).
#pragma once

#include <cstdint>

#include "models/kernels/ops.h"
#include "base/tensor/dtype.h"

namespace tower::cuda {

// Float operands are of the compute type `t` (f32, f16 or bf16); the kernels compute in f32.
void fill(DType t, void* x, int64_t n, float value);
void axpy(DType t, float alpha, const void* x, void* y, int64_t n);
void bias_act(DType t, void* y, const void* bias, int64_t outer, int64_t channels, int64_t inner, bool relu);
// db[c] (+)= sum over o, i of dy[o, c, i], with `partials` (bias_grad_partials(channels) floats)
// as scratch: each channel is split across up to bias_grad_splits blocks, so a convolution's few
// channels still fill the GPU.
constexpr int64_t bias_grad_splits = 32;
constexpr int64_t bias_grad_partials(int64_t channels)
{
	return channels * bias_grad_splits;
}
void bias_grad(DType t, const void* dy, void* db, int64_t outer, int64_t channels, int64_t inner, bool accumulate,
	       float* partials);
void relu_forward(DType t, const void* x, void* y, int64_t n);
void relu_backward(DType t, const void* y, const void* dy, void* dx, int64_t n);
// dst (type dt) = or += src (type st).
void cast(DType st, const void* src, DType dt, void* dst, int64_t n, bool accumulate);

// `images` images [images, C, H, W] to and from columns [C*k*k, images * OH*OW].
void im2col(DType t, const ConvGeometry& g, int64_t images, const void* image, void* col);
void col2im(DType t, const ConvGeometry& g, int64_t images, const void* col, void* image);

void maxpool_forward(DType t, const void* x, void* y, int32_t* argmax, int64_t planes, int64_t h, int64_t w);
void maxpool_backward(DType t, const void* dy, const int32_t* argmax, void* dx, int64_t planes, int64_t h,
		      int64_t w);

// Writes probs and, into totals[0..1], the summed loss and the correct count (as floats, exact
// below 2^24 rows); `bad_label` becomes 1 when a label is out of range. row_loss: 2 * rows floats.
void softmax_xent_forward(DType t, const void* logits, const int32_t* labels, void* probs, float* row_loss,
			  float* totals, int32_t* bad_label, int64_t rows, int64_t classes);
// dlogits = (probs - onehot) * scale / rows.
void softmax_xent_backward(DType t, const void* probs, const int32_t* labels, void* dlogits, int64_t rows,
			   int64_t classes, float scale);

// The transformer's kernels (layernorm.cu, attention.cu, embedding.cu, elementwise.cu); shapes as
// in models/kernels/ops.h, float operands of the compute type t except where f32 is named.
void layernorm_forward(DType t, const void* x, const float* gamma, const float* beta, float eps, void* y,
		       float* mean, float* rstd, int64_t rows, int64_t channels);
void layernorm_backward(DType t, const void* dy, const void* x, const float* gamma, const float* mean,
			const float* rstd, void* dx, float* dgamma, float* dbeta, int64_t rows, int64_t channels,
			bool accumulate);
void gelu_forward(DType t, const void* x, void* y, int64_t n);
void gelu_backward(DType t, const void* x, const void* dy, void* dx, int64_t n);
void causal_softmax_forward(DType t, const void* scores, float scale, void* probs, int64_t n, int64_t time);
void causal_softmax_backward(DType t, const void* probs, const void* dprobs, float scale, void* dscores, int64_t n,
			     int64_t time);
void permute_heads(DType t, void* rows, int64_t width, int64_t offset, void* heads, int64_t batch, int64_t head_count,
		   int64_t time, int64_t head_dim, bool to_heads);
// One operand of a batched product: matrix (g, i) starts at base + (g * group_stride + i * stride)
// elements of element_bytes each.
struct StridedOperand {
	void* base = nullptr;
	int64_t stride = 0;
	int64_t group_stride = 0;
	int64_t element_bytes = 0;
};
struct BatchOperands {
	StridedOperand operand[3];
};
// pointers[v * batch * groups + g * batch + i] = the start of matrix (g, i) of operand v, for
// cublasGemmBatchedEx (batch_pointers.cu).
void batch_pointers(const BatchOperands& operands, int64_t batch, int64_t groups, void** pointers);
void split_windows(const int32_t* windows, int32_t* inputs, int32_t* targets, int64_t batch, int64_t time);
// A token outside [0, vocab) reads as a zero row (the CPU backend throws instead).
void embedding_forward(DType t, const int32_t* tokens, const void* table, void* out, int64_t n, int64_t vocab,
		       int64_t channels);
void embedding_backward(DType t, const int32_t* tokens, const void* dout, float* dtable, int64_t n, int64_t vocab,
			int64_t channels, bool accumulate);

// f32 x: the sum of squares into *out (f64; added to it with `accumulate`) through `partials`
// (max_partials doubles), in a fixed order; inf or NaN anywhere makes it non-finite.
constexpr int64_t max_partials = 1024;
void sum_of_squares(const float* x, int64_t n, double* partials, double* out, bool accumulate);
void scale(float* x, int64_t n, float factor);

// Throws tower::Error for a dtype the kernels have no instantiation for (defined in C++, so fmt
// stays out of nvcc).
[[noreturn]] void unsupported_type(DType t);

// Throws tower::Error if the last launch failed.
void check_launch(const char* what);

} // namespace tower::cuda
