// Causal self-attention by blocks of positions on the op interface's strided products and causal
// softmax: the default of Ops::causal_attention_forward and _backward (CUDA, 16-bit types).
#include <algorithm>
#include <cmath>

#include "models/kernels/ops.h"
#include "models/kernels/ops_checks.h"
#include "base/error.h"

namespace tower {

namespace {

// Calls body(first, count) for each block of `block` positions of [0, t).
template <class Body>
void for_each_block(int64_t t, int64_t block, Body&& body)
{
	for (int64_t first = 0; first < t; first += block)
		body(first, std::min(block, t - first));
}

// One layer's attention: B sequences of T positions, heads of width D side by side in rows, taken
// by blocks of `block` positions.
struct Blocks {
	int64_t batch, time, heads, d, block;

	// The heads of rows [B * T, W'] from column col0 on, one matrix [T, D] per sequence and head,
	// in the order of the scores' items (sequence-major).
	MatrixBatch heads_of(const Tensor& rows, int64_t col0) const
	{
		return heads_in_rows(rows, batch, col0, heads, d);
	}
	// A block of every item of the scores [B * heads, T, T], grouped by sequence like heads_of.
	MatrixBatch scores_block(const Tensor& scores, int64_t row0, int64_t rows, int64_t col0, int64_t cols) const
	{
		return block_of(scores, row0, rows, col0, cols).grouped(batch);
	}
	float scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }
};

// Scores q k^T of each block of queries against the keys up to its last position.
void scores_forward(const Ops& ops, const Blocks& s, const Tensor& qkv, const Tensor& scores)
{
	const MatrixBatch q = s.heads_of(qkv, 0), k = s.heads_of(qkv, s.heads * s.d);
	for_each_block(s.time, s.block, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::yes, 1.0f, q.row_range(r0, rows), k.row_range(0, r0 + rows),
					 0.0f, s.scores_block(scores, r0, rows, 0, r0 + rows));
	});
}

// y = P v, block of queries by block: probabilities past a block's last position are 0.
void values_forward(const Ops& ops, const Blocks& s, const Tensor& qkv, const Tensor& probs, const Tensor& y)
{
	const MatrixBatch v = s.heads_of(qkv, 2 * s.heads * s.d), yh = s.heads_of(y, 0);
	for_each_block(s.time, s.block, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, s.scores_block(probs, r0, rows, 0, r0 + rows),
					 v.row_range(0, r0 + rows), 0.0f, yh.row_range(r0, rows));
	});
}

// dP = dy v^T by blocks of queries; dv = P^T dy by blocks of keys, each from the queries at or
// after its first position (the others gave it probability 0).
void values_backward(const Ops& ops, const Blocks& s, const Tensor& qkv, const Tensor& probs, const Tensor& dy,
		     const Tensor& dprobs, const Tensor& dqkv)
{
	const int64_t width = s.heads * s.d;
	const MatrixBatch v = s.heads_of(qkv, 2 * width), dyh = s.heads_of(dy, 0), dv = s.heads_of(dqkv, 2 * width);
	for_each_block(s.time, s.block, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::yes, 1.0f, dyh.row_range(r0, rows),
					 v.row_range(0, r0 + rows), 0.0f, s.scores_block(dprobs, r0, rows, 0, r0 + rows));
		ops.gemm_strided_batched(Transpose::yes, Transpose::no, 1.0f,
					 s.scores_block(probs, r0, s.time - r0, r0, rows), dyh.row_range(r0, s.time - r0),
					 0.0f, dv.row_range(r0, rows));
	});
}

// dq = dS k by blocks of queries; dk = dS^T q by blocks of keys, as above.
void scores_backward(const Ops& ops, const Blocks& s, const Tensor& qkv, const Tensor& dscores, const Tensor& dqkv)
{
	const int64_t width = s.heads * s.d;
	const MatrixBatch q = s.heads_of(qkv, 0), k = s.heads_of(qkv, width);
	const MatrixBatch dq = s.heads_of(dqkv, 0), dk = s.heads_of(dqkv, width);
	for_each_block(s.time, s.block, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, s.scores_block(dscores, r0, rows, 0, r0 + rows),
					 k.row_range(0, r0 + rows), 0.0f, dq.row_range(r0, rows));
		ops.gemm_strided_batched(Transpose::yes, Transpose::no, 1.0f,
					 s.scores_block(dscores, r0, s.time - r0, r0, rows), q.row_range(r0, s.time - r0),
					 0.0f, dk.row_range(r0, rows));
	});
}

} // namespace

double causal_block_share(int64_t t, int64_t block)
{
	double computed = 0.0;
	for_each_block(t, block, [&](int64_t first, int64_t count) {
		computed += static_cast<double>(count) * static_cast<double>(first + count);
	});
	return t > 0 ? computed / (static_cast<double>(t) * static_cast<double>(t)) : 0.0;
}

void Ops::causal_attention_forward(const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& scores,
				   const Tensor& probs, const Tensor& y) const
{
	const AttentionDims a = check_causal_attention(qkv, batch, heads, probs, y);
	check_causal_softmax(scores, probs);
	const Blocks s{batch, a.time, heads, a.d, causal_attention_block()};
	scores_forward(*this, s, qkv, scores);
	// Scaled by 1/sqrt(D) inside the softmax, which reads no score past a query's position and
	// gives those keys 0.
	causal_softmax_forward(scores, s.scale(), probs);
	values_forward(*this, s, qkv, probs, y);
}

void Ops::causal_attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t batch,
				    int64_t heads, const Tensor& dprobs, const Tensor& dqkv) const
{
	const AttentionDims a = check_causal_attention(qkv, batch, heads, probs, dy);
	check_causal_softmax(probs, dprobs);
	expect_same_dtype(qkv, dqkv, "causal attention backward");
	TOWER_CHECK(dqkv.shape() == qkv.shape(), "attention's qkv gradient {} is not qkv's shape {}",
		    shape_text(dqkv.shape()), shape_text(qkv.shape()));
	const Blocks s{batch, a.time, heads, a.d, causal_attention_block()};
	// y = P V: dP = dY V^T and dV = P^T dY; through the softmax in place (it reads no dP past a
	// query's position and writes 0 there); then S = Q K^T: dQ = dS K and dK = dS^T Q. Every
	// head's dq, dk and dv is written in place into the rows of dqkv, which the blocks cover whole.
	values_backward(*this, s, qkv, probs, dy, dprobs, dqkv);
	causal_softmax_backward(probs, dprobs, s.scale(), dprobs);
	scores_backward(*this, s, qkv, dprobs, dqkv);
}

} // namespace tower
