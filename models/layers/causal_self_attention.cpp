// Multi-head causal self-attention: one projection to queries, keys and values, scaled dot-product
// attention in which each position sees itself and the positions before it, and an output projection.
#include "models/layers/causal_self_attention.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace tower {

CausalSelfAttention::CausalSelfAttention(int64_t width, int64_t heads, Linear qkv, Linear proj)
	: width_(width), heads_(heads), qkv_(std::move(qkv)), proj_(std::move(proj))
{
	TOWER_CHECK(heads > 0 && width % heads == 0, "attention width {} does not split into {} heads", width, heads);
}

std::vector<Parameter*> CausalSelfAttention::parameters()
{
	std::vector<Parameter*> all = qkv_.parameters();
	for (Parameter* p : proj_.parameters())
		all.push_back(p);
	return all;
}

namespace {

// Calls body(first, count) for each block of [0, t).
template <class Body>
void for_each_block(int64_t t, Body&& body)
{
	for (int64_t first = 0; first < t; first += causal_block_positions)
		body(first, std::min(causal_block_positions, t - first));
}

} // namespace

double causal_block_share(int64_t t)
{
	double computed = 0.0;
	for_each_block(t, [&](int64_t first, int64_t count) {
		computed += static_cast<double>(count) * static_cast<double>(first + count);
	});
	return t > 0 ? computed / (static_cast<double>(t) * static_cast<double>(t)) : 0.0;
}

MatrixBatch CausalSelfAttention::heads_of(const Tensor& rows, int64_t col0) const
{
	return heads_in_rows(rows, batch_, col0, heads_, width_ / heads_);
}

MatrixBatch CausalSelfAttention::scores_block(const Tensor& scores, int64_t row0, int64_t rows, int64_t col0,
					      int64_t cols) const
{
	return block_of(scores, row0, rows, col0, cols).grouped(batch_);
}

// Scores q k^T of each block of queries against the keys up to its last position.
void CausalSelfAttention::scores_forward(const Ops& ops, const Tensor& scores) const
{
	const MatrixBatch q = heads_of(qkv_rows_, 0), k = heads_of(qkv_rows_, width_);
	for_each_block(time_, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::yes, 1.0f, q.row_range(r0, rows), k.row_range(0, r0 + rows),
					 0.0f, scores_block(scores, r0, rows, 0, r0 + rows));
	});
}

// y = P v, block of queries by block: probabilities past a block's last position are 0.
void CausalSelfAttention::values_forward(const Ops& ops, const Tensor& y) const
{
	const MatrixBatch v = heads_of(qkv_rows_, 2 * width_), yh = heads_of(y, 0);
	for_each_block(time_, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, scores_block(probs_, r0, rows, 0, r0 + rows),
					 v.row_range(0, r0 + rows), 0.0f, yh.row_range(r0, rows));
	});
}

// dP = dy v^T by blocks of queries; dv = P^T dy by blocks of keys, each from the queries at or
// after its first position (the others gave it probability 0).
void CausalSelfAttention::values_backward(const Ops& ops, const Tensor& dy, const Tensor& dprobs,
					  const Tensor& dqkv) const
{
	const MatrixBatch v = heads_of(qkv_rows_, 2 * width_), dyh = heads_of(dy, 0), dv = heads_of(dqkv, 2 * width_);
	for_each_block(time_, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::yes, 1.0f, dyh.row_range(r0, rows),
					 v.row_range(0, r0 + rows), 0.0f, scores_block(dprobs, r0, rows, 0, r0 + rows));
		ops.gemm_strided_batched(Transpose::yes, Transpose::no, 1.0f, scores_block(probs_, r0, time_ - r0, r0, rows),
					 dyh.row_range(r0, time_ - r0), 0.0f, dv.row_range(r0, rows));
	});
}

// dq = dS k by blocks of queries; dk = dS^T q by blocks of keys, as above.
void CausalSelfAttention::scores_backward(const Ops& ops, const Tensor& dscores, const Tensor& dqkv) const
{
	const MatrixBatch q = heads_of(qkv_rows_, 0), k = heads_of(qkv_rows_, width_);
	const MatrixBatch dq = heads_of(dqkv, 0), dk = heads_of(dqkv, width_);
	for_each_block(time_, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, scores_block(dscores, r0, rows, 0, r0 + rows),
					 k.row_range(0, r0 + rows), 0.0f, dq.row_range(r0, rows));
		ops.gemm_strided_batched(Transpose::yes, Transpose::no, 1.0f,
					 scores_block(dscores, r0, time_ - r0, r0, rows), q.row_range(r0, time_ - r0), 0.0f,
					 dk.row_range(r0, rows));
	});
}

const Tensor& CausalSelfAttention::forward(const Tensor& x, int64_t batch)
{
	TOWER_CHECK(batch > 0 && x.rank() == 2 && x.dim(0) % batch == 0 && x.dim(1) == width_,
		    "attention expects [batch * T, {}] for {} sequences, got {}", width_, batch, shape_text(x.shape()));
	const Ops& ops = ops_for(x.device());
	const DType type = x.dtype();
	batch_ = batch;
	time_ = x.dim(0) / batch;
	// Queries, keys and values stay where the projection wrote them, [B * T, 3 * width]: the
	// products read each head in place (heads_in_rows), so no head is copied anywhere.
	qkv_rows_ = qkv_.forward(x);
	// Scores q k^T for each position and those before it, scaled by 1/sqrt(head width) inside the
	// softmax; the softmax reads no score past a query's position and gives those keys 0.
	const Tensor& scores = scores_ws_.get(scores_shape(), type, x.device());
	scores_forward(ops, scores);
	probs_ = probs_ws_.get(scores_shape(), type, x.device());
	const float scale = 1.0f / std::sqrt(static_cast<float>(width_ / heads_));
	ops.causal_softmax_forward(scores, scale, probs_);
	const Tensor& y = y_ws_.get({batch_ * time_, width_}, type, x.device());
	values_forward(ops, y);
	return proj_.forward(y);
}

const Tensor& CausalSelfAttention::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(probs_.data() != nullptr, "attention backward without a forward");
	const Ops& ops = ops_for(dy.device());
	const DType type = dy.dtype();
	BackwardArgs inner = args;
	inner.need_input_grad = true;
	const Tensor& dy_rows = proj_.backward(dy, inner);
	// Every head's dq, dk and dv is written in place into the rows of dqkv, which the blocks
	// cover whole.
	const Tensor& dqkv = dqkv_ws_.get({batch_ * time_, 3 * width_}, type, dy.device());
	// y = P V: dP = dY V^T and dV = P^T dY.
	const Tensor& dprobs = dprobs_ws_.get(scores_shape(), type, dy.device());
	values_backward(ops, dy_rows, dprobs, dqkv);
	// Through the softmax (in place; it reads no dP past a query's position and writes 0 there),
	// then S = Q K^T: dQ = dS K and dK = dS^T Q.
	const float scale = 1.0f / std::sqrt(static_cast<float>(width_ / heads_));
	ops.causal_softmax_backward(probs_, dprobs, scale, dprobs);
	scores_backward(ops, dprobs, dqkv);
	return qkv_.backward(dqkv, args);
}

} // namespace tower
