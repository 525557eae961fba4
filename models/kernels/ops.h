// The tensor operations layers are built from, behind one interface with a CPU and a CUDA backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/tensor/tensor.h"

namespace tower {

enum class Transpose { no, yes };

// Geometry of a square-kernel, stride-1 convolution over one image [channels, height, width].
// (constexpr so CUDA kernels can call the helpers too.)
struct ConvGeometry {
	int64_t channels = 0;
	int64_t height = 0;
	int64_t width = 0;
	int64_t kernel = 0;
	int64_t padding = 0;

	constexpr int64_t out_height() const { return height + 2 * padding - kernel + 1; }
	constexpr int64_t out_width() const { return width + 2 * padding - kernel + 1; }
	constexpr int64_t col_rows() const { return channels * kernel * kernel; }
	constexpr int64_t col_cols() const { return out_height() * out_width(); }
};

// The default convolution's workspace per image: its columns [C*k*k, OH*OW] and its output's
// channels [OC, OH*OW].
constexpr int64_t conv_workspace_per_image(const ConvGeometry& g, int64_t oc)
{
	return (g.col_rows() + oc) * g.col_cols();
}

// The workspace (in elements of `element_bytes` each) for the default convolution of `batch`
// images: room for as many as fit in 128 MiB, at least one, at most the batch.
int64_t conv_workspace_elements(const ConvGeometry& g, int64_t oc, int64_t batch, size_t element_bytes);

// `groups * batch` matrices [rows, cols] inside one tensor, for strided batched products: matrix
// (g, i) starts at element offset + g * group_stride + i * stride, each of its rows `ld` elements
// after the one before. Blocks of a batch of matrices (attention's causal blocks) and the heads
// inside rows of a [B, T, heads * D] tensor (groups B, batch heads, stride D, ld heads * D) are
// views of this kind, with no copy.
struct MatrixBatch {
	Tensor tensor;
	int64_t offset = 0;
	int64_t batch = 0;
	int64_t rows = 0;
	int64_t cols = 0;
	int64_t ld = 0;
	int64_t stride = 0;
	int64_t groups = 1;
	int64_t group_stride = 0;

	// Rows [row0, row0 + count) of every matrix; columns [col0, col0 + count).
	MatrixBatch row_range(int64_t row0, int64_t count) const;
	MatrixBatch col_range(int64_t col0, int64_t count) const;
	// The same matrices as `groups` groups of batch / groups (a view of one group to begin with):
	// for products with views that are grouped.
	MatrixBatch grouped(int64_t groups) const;
};

// Rows [row0, row0 + rows) and columns [col0, col0 + cols) of every item of a 3-D tensor [B, R, C].
MatrixBatch block_of(const Tensor& t, int64_t row0, int64_t rows, int64_t col0, int64_t cols);
// Rows [row0, row0 + rows) of every item, all columns.
MatrixBatch rows_of(const Tensor& t, int64_t row0, int64_t rows);
// The heads of `rows` [B * T, W'] from column `col0` on: `heads` matrices [T, D] per sequence,
// side by side in each row (matrix (b, h) is rows b * T .. b * T + T - 1, columns col0 + h * D ..).
MatrixBatch heads_in_rows(const Tensor& rows, int64_t sequences, int64_t col0, int64_t heads, int64_t d);

// The default attention goes by blocks of positions: block i of queries sees the keys of blocks
// 0..i only, so at blocks of 32 and T = 128 its products cover 5/8 of the T x T square. Blocks of
// 32 on the CPU; a backend may choose larger ones (Ops::causal_attention_block).
constexpr int64_t causal_block_positions = 32;

// The share of the T x T products blocks of `block` positions compute at context t.
double causal_block_share(int64_t t, int64_t block = causal_block_positions);

struct XentResult {
	float loss = 0.0f;   // mean over the batch
	int64_t correct = 0; // rows whose arg-max equals the label
};

// Every tensor is dense and row-major; all tensors of one call live on the device the Ops object was
// chosen for. The float operands of one call share one element type, f32, f16 or bf16 (the
// compute type of mixed precision): 16-bit data is read, computed on in f32 (GEMMs accumulate in
// f32) and rounded once when written, so overflow gives inf as on the GPU. Operations may run
// asynchronously on that device; results that come back to the host wait for it.
class Ops {
public:
	virtual ~Ops() = default;

	// c = alpha * op(a) * op(b) + beta * c for 2-D a, b, c (op transposes when asked).
	virtual void gemm(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
			  const Tensor& c) const = 0;

	// The weight gradient of mixed precision straight into f32: c = alpha * op(a) * op(b) + beta * c
	// with a and b of one 16-bit type and c f32, accumulated in f32 and never rounded to 16 bits
	// (the gradient's master copy is f32 in any case). Returns false, touching nothing, where the
	// backend has no such kernel for the types: the caller then computes into a 16-bit buffer and
	// casts that into c.
	virtual bool gemm_into_f32(Transpose /*ta*/, Transpose /*tb*/, float /*alpha*/, const Tensor& /*a*/,
				   const Tensor& /*b*/, float /*beta*/, const Tensor& /*c*/) const
	{
		return false;
	}

	// Empty where products of `type` run on kernels made for it; otherwise why they do not (the
	// CPU without oneDNN kernels for a 16-bit type widens each product's operands to f32 and
	// computes in f32): such a run pays the casts and gains no faster products, and the trainer
	// says so at its start.
	virtual std::string why_products_widen(DType /*type*/) const { return {}; }

	virtual void fill(const Tensor& x, float value) const = 0;
	// y += alpha * x.
	virtual void accumulate(float alpha, const Tensor& x, const Tensor& y) const = 0;

	// y viewed as [outer, bias.numel(), inner]: y[o, c, i] += bias[c], then max(0, .) with `relu`.
	virtual void bias_act(const Tensor& y, const Tensor& bias, int64_t inner, bool relu) const = 0;
	// A layer's product and its bias in one: c = op(a) op(b) + bias (bias: one value per column
	// of c, of c's type), then max(0, .) with `relu` (NaN stays NaN). The CPU adds the bias inside
	// the product, before c is written (a 16-bit c is rounded once, after the bias), and the ReLU
	// after; by default (fused_defaults.cpp, what CUDA runs) it is gemm, then bias_act.
	virtual void gemm_bias_act(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b, const Tensor& bias,
				   bool relu, const Tensor& c) const;
	// db[c] (+)= sum over o, i of dy[o, c, i]; adds to db with `accumulate`.
	virtual void bias_grad(const Tensor& dy, const Tensor& db, int64_t inner, bool accumulate) const = 0;

	virtual void relu_forward(const Tensor& x, const Tensor& y) const = 0;
	// dx = dy where y > 0, else 0; dx must not overlap y or dy.
	virtual void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const = 0;

	// n images [n, C, H, W] (or one, [C, H, W]) to columns [C*k*k, n * OH*OW] side by side
	// (column j is output pixel j % OH*OW of image j / OH*OW), and back (col2im adds overlapping
	// entries and overwrites the images).
	virtual void im2col(const ConvGeometry& g, const Tensor& images, const Tensor& col) const = 0;
	virtual void col2im(const ConvGeometry& g, const Tensor& col, const Tensor& images) const = 0;

	// Whole-batch convolution of x [N, C, H, W] with w [OC, C, k, k] into y [N, OC, OH, OW] (no
	// bias), and its gradients: dx (overwritten) from dy and w, and dw from x and dy (added to dw
	// with `accumulate`). By default (conv_im2col.cpp) they are im2col, one GEMM and a reorder per
	// pass over as many images as `workspace` holds (conv_workspace_elements of the compute type,
	// any shape); a backend with convolution kernels of its own overrides them, returns false from
	// conv_uses_columns() and is given an empty workspace.
	virtual bool conv_uses_columns() const { return true; }
	virtual void conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& y,
				    const Tensor& workspace) const;
	virtual void conv2d_backward_data(const ConvGeometry& g, const Tensor& w, const Tensor& dy, const Tensor& dx,
					  const Tensor& workspace) const;
	virtual void conv2d_backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
					     bool accumulate, const Tensor& workspace) const;

	// 2x2 stride-2 max pooling of x [N, C, H, W] into y [N, C, H/2, W/2]; `argmax` (i32, y's shape)
	// records the flat index within each image plane of the chosen input for the backward pass.
	virtual void maxpool_forward(const Tensor& x, const Tensor& y, const Tensor& argmax) const = 0;
	// dx = 0 except at the recorded positions, which receive dy.
	virtual void maxpool_backward(const Tensor& dy, const Tensor& argmax, const Tensor& dx) const = 0;

	// Softmax of logits [B, K] into probs, and the mean cross-entropy against labels (i32 [B]).
	virtual XentResult softmax_xent_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs) const = 0;
	// dlogits = (probs - onehot(labels)) * scale / B, rounded to dlogits' type after the scaling
	// (scale is the loss scale of mixed precision).
	virtual void softmax_xent_backward(const Tensor& probs, const Tensor& labels, const Tensor& dlogits,
					   float scale) const = 0;

	// Batched c[i] = alpha * op(a[i]) * op(b[i]) + beta * c[i] for whole 3-D a, b, c of one batch
	// count (attention uses gemm_strided_batched below).
	virtual void gemm_batched(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b,
				  float beta, const Tensor& c) const;
	// The same over strided views: c[i] = alpha * op(a[i]) * op(b[i]) + beta * c[i] for the matrices
	// of three MatrixBatch views of one batch and group count (c's matrices must not share elements).
	virtual void gemm_strided_batched(Transpose ta, Transpose tb, float alpha, const MatrixBatch& a,
					  const MatrixBatch& b, float beta, const MatrixBatch& c) const = 0;

	// The transformer's operations. x, y and their gradients are of the compute type; LayerNorm's
	// gain and bias, their gradients and the row statistics are f32 (normalization is computed in
	// f32 whatever the compute type, as in PyTorch's autocast).

	// Over the last dimension of x [rows, C]: y = (x - mean) * rstd * gamma + beta, keeping each
	// row's mean and rstd = 1 / sqrt(var + eps) (f32 [rows]) for the backward pass.
	virtual void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
				       const Tensor& y, const Tensor& mean, const Tensor& rstd) const = 0;
	// dx (overwritten) from dy; dgamma and dbeta (f32) overwritten, or added to with `accumulate`.
	virtual void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
					const Tensor& rstd, const Tensor& dx, const Tensor& dgamma,
					const Tensor& dbeta, bool accumulate) const = 0;
	// The residual adds around a pre-LayerNorm block's normalizations, each in the pass of the
	// LayerNorm beside it. Forward: sum = a + b (sum may be a itself), then layernorm_forward of
	// sum. Backward: layernorm_backward, then dx += residual. The CPU does both in one pass over
	// the rows for f32 (the same bits as the parts); by default (fused_defaults.cpp, what CUDA and
	// the 16-bit types run) the parts, accumulate and layernorm_*, one after the other. Only a and
	// sum may share memory: not b and sum, not y and sum, not dx and dy or residual.
	virtual void add_layernorm_forward(const Tensor& a, const Tensor& b, const Tensor& gamma, const Tensor& beta,
					   float eps, const Tensor& sum, const Tensor& y, const Tensor& mean,
					   const Tensor& rstd) const;
	virtual void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
					    const Tensor& rstd, const Tensor& residual, const Tensor& dx,
					    const Tensor& dgamma, const Tensor& dbeta, bool accumulate) const;

	// GELU, tanh form (GPT-2's): y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); dx from x and dy.
	virtual void gelu_forward(const Tensor& x, const Tensor& y) const = 0;
	virtual void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const = 0;
	// gelu_backward and the bias gradient of its result, [rows, channels] with db [channels]:
	// db[c] (+)= sum over rows of dx[., c] (adds with `accumulate`). The CPU does both in one pass
	// over dx while its rows are in cache, summing dx before it is rounded to a 16-bit type; by
	// default (fused_defaults.cpp, what CUDA runs) gelu_backward, then bias_grad of the stored dx.
	virtual void gelu_backward_bias_grad(const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& db,
					     bool accumulate) const;
	// GELU with its slope kept, where gelu_keeps_slope(type) (the CPU in f32): gelu_forward_slope
	// writes y = GELU(x) and then GELU'(x) over x; slope_backward_bias_grad takes dx = dy * slope
	// and db as gelu_backward_bias_grad does, to its bits, but with no exponential left in the
	// backward pass (dx may be slope itself, not dy). Elsewhere (CUDA, the 16-bit types) a layer
	// keeps x and runs the above; the defaults (fused_defaults.cpp) refuse, naming the backend.
	virtual bool gelu_keeps_slope(DType /*type*/) const { return false; }
	virtual void gelu_forward_slope(const Tensor& x, const Tensor& y) const;
	virtual void slope_backward_bias_grad(const Tensor& slope, const Tensor& dy, const Tensor& dx, const Tensor& db,
					      bool accumulate) const;

	// Causal softmax of scores [N, T, T]: probs[n, i, j] = softmax over j <= i of scale * scores,
	// and 0 for j > i (a position sees itself and the positions before it). Scores above the
	// diagonal are never used (attention leaves blocks of them unwritten).
	virtual void causal_softmax_forward(const Tensor& scores, float scale, const Tensor& probs) const = 0;
	// dscores = scale * probs * (dprobs - sum_j probs * dprobs), 0 above the diagonal, where dprobs
	// is never used; dscores may be dprobs itself.
	virtual void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
					     const Tensor& dscores) const = 0;

	// Causal self-attention of one layer with its heads side by side in rows: qkv [B * T, 3 * W]
	// holds the queries, keys and values (W = heads * D; head h is columns h * D .. of each), y
	// [B * T, W] receives softmax(q k^T / sqrt(D), causal) v of each head; probs [B * heads, T, T]
	// keeps the probabilities for the backward pass (0 above the diagonal) and scores [B * heads, T, T] is room for the scores. By default
	// (causal_attention.cpp, what CUDA and 16-bit types run) strided products by blocks of
	// causal_attention_block() positions and the causal softmax ops; the CPU runs f32 on kernels of its own
	// (cpu/attention_f32.cpp) where GCC built them for x86-64, the CPU has AVX-512 and
	// the rank runs one thread.
	virtual void causal_attention_forward(const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& scores,
					      const Tensor& probs, const Tensor& y) const;
	// dqkv [B * T, 3 * W] (every element written) from dy [B * T, W] and the forward's qkv and
	// probs; dprobs [B * heads, T, T] is room for the probabilities' gradient.
	virtual void causal_attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t batch,
					       int64_t heads, const Tensor& dprobs, const Tensor& dqkv) const;
	// The positions per block of the default attention above: more blocks skip more of the masked
	// half, and cost more products.
	virtual int64_t causal_attention_block() const { return causal_block_positions; }
	// Whether the two above use their scores and dprobs room for this type: where they do not
	// (the CPU's own f32 kernels keep one head's in cache), the caller may pass empty tensors.
	virtual bool causal_attention_uses_room(DType /*type*/) const { return true; }

	// Moves heads between rows and heads: rows [B, T, W] and heads [B, H, T, D] with
	// heads[b, h, t, d] = rows[b, t, offset + h * D + d]; copies rows into heads with `to_heads`,
	// heads into rows otherwise (other columns of rows are left alone). Attention reads its heads in
	// place (strided views); the default convolution uses this for its output channels.
	virtual void permute_heads(const Tensor& rows, int64_t offset, const Tensor& heads, bool to_heads) const = 0;

	// Token windows i32 [B, T + 1] into a model's inputs (the first T of each, i32 [B * T]) and
	// targets (the last T, i32 [B * T]).
	virtual void split_windows(const Tensor& windows, const Tensor& inputs, const Tensor& targets) const = 0;
	// out[n] = table[tokens[n]] for i32 tokens [N], table [V, C] and out [N, C] of one type; for a
	// token outside [0, V) the CPU throws tower::Error and CUDA writes a row of zeros (it does not
	// read the tokens back to check them).
	virtual void embedding_forward(const Tensor& tokens, const Tensor& table, const Tensor& out) const = 0;
	// dtable[v] (+)= sum of dout[n] over n with tokens[n] == v, into f32 dtable [V, C] in a fixed
	// order (deterministic); dout of the compute type. Overwrites dtable unless `accumulate`.
	virtual void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable,
					bool accumulate) const = 0;

	// dst = src converted to dst's type (any two of f32, f16, bf16; same element count); with
	// `accumulate`, dst += src instead, computed in f32.
	virtual void cast(const Tensor& src, const Tensor& dst, bool accumulate) const = 0;

	// Gradient hygiene, f32 tensors only: whether no element is inf or NaN, the sum of the
	// squared elements (in f64), and x *= factor.
	virtual bool all_finite(const Tensor& x) const = 0;
	virtual double sum_of_squares(const Tensor& x) const = 0;
	virtual void scale(const Tensor& x, float factor) const = 0;
	// The sum over xs of sum_of_squares(x), added in xs' order; on a GPU one read for all of them.
	virtual double sum_of_squares_all(const std::vector<Tensor>& xs) const;
};

// The backend for tensors on `device`. Throws tower::Error when the build has no backend for it.
const Ops& ops_for(const Device& device);

// The CPU backend, and the CUDA backend of one device (throws in a build without CUDA).
const Ops& cpu_ops();
const Ops& cuda_ops(int device_index);

// The gradient-hygiene operations on the backend of x's device.
bool all_finite(const Tensor& x);
double sum_of_squares(const Tensor& x);
// sum_of_squares_all on the backend of xs' device (0 for none).
double sum_of_squares_all(const std::vector<Tensor>& xs);
void scale(const Tensor& x, float factor);

} // namespace tower
