// Multi-head causal self-attention: one projection to queries, keys and values, scaled dot-product
// attention in which each position sees itself and the positions before it, and an output projection.
#include "models/layers/causal_self_attention.h"

#include <cmath>

#include "models/kernels/ops.h"
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
	// Scores q k^T for every pair of positions, scaled by 1/sqrt(head width) inside the softmax.
	const Tensor& scores = scores_ws_.get(scores_shape(), type, x.device());
	ops.gemm_batched(Transpose::no, Transpose::yes, 1.0f, per_head(q_), per_head(k_), 0.0f, scores);
	probs_ = probs_ws_.get(scores_shape(), type, x.device());
	const float scale = 1.0f / std::sqrt(static_cast<float>(width_ / heads_));
	ops.causal_softmax_forward(scores, scale, probs_);
	const Tensor& yh = yh_ws_.get(heads_shape(), type, x.device());
	ops.gemm_batched(Transpose::no, Transpose::no, 1.0f, probs_, per_head(v_), 0.0f, per_head(yh));
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
	ops.gemm_batched(Transpose::no, Transpose::yes, 1.0f, per_head(dyh), per_head(v_), 0.0f, dprobs);
	const Tensor& dv = dv_ws_.get(heads_shape(), type, dy.device());
	ops.gemm_batched(Transpose::yes, Transpose::no, 1.0f, probs_, per_head(dyh), 0.0f, per_head(dv));
	// Through the softmax (in place), then S = Q K^T: dQ = dS K and dK = dS^T Q.
	const float scale = 1.0f / std::sqrt(static_cast<float>(width_ / heads_));
	ops.causal_softmax_backward(probs_, dprobs, scale, dprobs);
	const Tensor& dq = dq_ws_.get(heads_shape(), type, dy.device());
	const Tensor& dk = dk_ws_.get(heads_shape(), type, dy.device());
	ops.gemm_batched(Transpose::no, Transpose::no, 1.0f, dprobs, per_head(k_), 0.0f, per_head(dq));
	ops.gemm_batched(Transpose::yes, Transpose::no, 1.0f, dprobs, per_head(q_), 0.0f, per_head(dk));
	const Tensor& dqkv = dqkv_ws_.get({batch_, time_, 3 * width_}, type, dy.device());
	ops.permute_heads(dqkv, 0, dq, false);
	ops.permute_heads(dqkv, width_, dk, false);
	ops.permute_heads(dqkv, 2 * width_, dv, false);
	return qkv_.backward(dqkv.reshaped({batch_ * time_, 3 * width_}), args);
}

} // namespace tower
