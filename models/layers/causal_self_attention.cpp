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

Tensor CausalSelfAttention::per_head(const Tensor& t) const
{
	return t.reshaped({batch_ * heads_, time_, width_ / heads_});
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

// Scores q k^T of each block of queries against the keys up to its last position.
void CausalSelfAttention::scores_forward(const Ops& ops, const Tensor& scores) const
{
	const Tensor q = per_head(q_), k = per_head(k_);
	for_each_block(time_, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::yes, 1.0f, rows_of(q, r0, rows), rows_of(k, 0, r0 + rows),
					 0.0f, block_of(scores, r0, rows, 0, r0 + rows));
	});
}

// y = P v, block of queries by block: probabilities past a block's last position are 0.
void CausalSelfAttention::values_forward(const Ops& ops, const Tensor& yh) const
{
	const Tensor v = per_head(v_), y = per_head(yh);
	for_each_block(time_, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, block_of(probs_, r0, rows, 0, r0 + rows),
					 rows_of(v, 0, r0 + rows), 0.0f, rows_of(y, r0, rows));
	});
}

// dP = dy v^T by blocks of queries; dv = P^T dy by blocks of keys, each from the queries at or
// after its first position (the others gave it probability 0).
void CausalSelfAttention::values_backward(const Ops& ops, const Tensor& dyh, const Tensor& dprobs,
					  const Tensor& dv) const
{
	const Tensor v = per_head(v_), dy = per_head(dyh), dvh = per_head(dv);
	for_each_block(time_, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::yes, 1.0f, rows_of(dy, r0, rows), rows_of(v, 0, r0 + rows),
					 0.0f, block_of(dprobs, r0, rows, 0, r0 + rows));
		ops.gemm_strided_batched(Transpose::yes, Transpose::no, 1.0f,
					 block_of(probs_, r0, time_ - r0, r0, rows), rows_of(dy, r0, time_ - r0), 0.0f,
					 rows_of(dvh, r0, rows));
	});
}

// dq = dS k by blocks of queries; dk = dS^T q by blocks of keys, as above.
void CausalSelfAttention::scores_backward(const Ops& ops, const Tensor& dscores, const Tensor& dq,
					  const Tensor& dk) const
{
	const Tensor q = per_head(q_), k = per_head(k_), dqh = per_head(dq), dkh = per_head(dk);
	for_each_block(time_, [&](int64_t r0, int64_t rows) {
		ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, block_of(dscores, r0, rows, 0, r0 + rows),
					 rows_of(k, 0, r0 + rows), 0.0f, rows_of(dqh, r0, rows));
		ops.gemm_strided_batched(Transpose::yes, Transpose::no, 1.0f,
					 block_of(dscores, r0, time_ - r0, r0, rows), rows_of(q, r0, time_ - r0), 0.0f,
					 rows_of(dkh, r0, rows));
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
	const Tensor qkv = qkv_.forward(x).reshaped({batch_, time_, 3 * width_});
	q_ = q_ws_.get(heads_shape(), type, x.device());
	k_ = k_ws_.get(heads_shape(), type, x.device());
	v_ = v_ws_.get(heads_shape(), type, x.device());
	ops.permute_heads(qkv, 0, q_, true);
	ops.permute_heads(qkv, width_, k_, true);
	ops.permute_heads(qkv, 2 * width_, v_, true);
	// Scores q k^T for each position and those before it, scaled by 1/sqrt(head width) inside the
	// softmax; the softmax reads no score past a query's position and gives those keys 0.
	const Tensor& scores = scores_ws_.get(scores_shape(), type, x.device());
	scores_forward(ops, scores);
	probs_ = probs_ws_.get(scores_shape(), type, x.device());
	const float scale = 1.0f / std::sqrt(static_cast<float>(width_ / heads_));
	ops.causal_softmax_forward(scores, scale, probs_);
	const Tensor& yh = yh_ws_.get(heads_shape(), type, x.device());
	values_forward(ops, yh);
	const Tensor& y = y_ws_.get({batch_, time_, width_}, type, x.device());
	ops.permute_heads(y, 0, yh, false);
	return proj_.forward(y.reshaped({batch_ * time_, width_}));
}

const Tensor& CausalSelfAttention::backward(const Tensor& dy, const BackwardArgs& args)
{
	TOWER_CHECK(probs_.data() != nullptr, "attention backward without a forward");
	const Ops& ops = ops_for(dy.device());
	const DType type = dy.dtype();
	BackwardArgs inner = args;
	inner.need_input_grad = true;
	const Tensor dy_rows = proj_.backward(dy, inner).reshaped({batch_, time_, width_});
	const Tensor& dyh = dyh_ws_.get(heads_shape(), type, dy.device());
	ops.permute_heads(dy_rows, 0, dyh, true);
	// y = P V: dP = dY V^T and dV = P^T dY.
	const Tensor& dprobs = dprobs_ws_.get(scores_shape(), type, dy.device());
	const Tensor& dv = dv_ws_.get(heads_shape(), type, dy.device());
	values_backward(ops, dyh, dprobs, dv);
	// Through the softmax (in place; it reads no dP past a query's position and writes 0 there),
	// then S = Q K^T: dQ = dS K and dK = dS^T Q.
	const float scale = 1.0f / std::sqrt(static_cast<float>(width_ / heads_));
	ops.causal_softmax_backward(probs_, dprobs, scale, dprobs);
	const Tensor& dq = dq_ws_.get(heads_shape(), type, dy.device());
	const Tensor& dk = dk_ws_.get(heads_shape(), type, dy.device());
	scores_backward(ops, dprobs, dq, dk);
	const Tensor& dqkv = dqkv_ws_.get({batch_, time_, 3 * width_}, type, dy.device());
	ops.permute_heads(dqkv, 0, dq, false);
	ops.permute_heads(dqkv, width_, dk, false);
	ops.permute_heads(dqkv, 2 * width_, dv, false);
	return qkv_.backward(dqkv.reshaped({batch_ * time_, 3 * width_}), args);
}

} // namespace tower
