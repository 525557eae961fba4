// Multi-head causal self-attention: one projection to queries, keys and values, scaled dot-product
// attention in which each position sees itself and the positions before it, and an output projection.
#include "models/layers/causal_self_attention.h"

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

const Tensor& CausalSelfAttention::forward(const Tensor& x, int64_t batch)
{
	TOWER_CHECK(batch > 0 && x.rank() == 2 && x.dim(0) % batch == 0 && x.dim(1) == width_,
		    "attention expects [batch * T, {}] for {} sequences, got {}", width_, batch, shape_text(x.shape()));
	const Ops& ops = ops_for(x.device());
	const DType type = x.dtype();
	batch_ = batch;
	time_ = x.dim(0) / batch;
	// Queries, keys and values stay where the projection wrote them, [B * T, 3 * width]: attention
	// reads each head in place, so no head is copied anywhere.
	qkv_rows_ = qkv_.forward(x);
	// Room for the scores only where the backend's attention uses it (not the CPU's f32 kernels).
	const Tensor scores = ops.causal_attention_uses_room(type) ? scores_ws_.get(scores_shape(), type, x.device())
								    : Tensor();
	probs_ = probs_ws_.get(scores_shape(), type, x.device());
	const Tensor& y = y_ws_.get({batch_ * time_, width_}, type, x.device());
	ops.causal_attention_forward(qkv_rows_, batch_, heads_, scores, probs_, y);
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
	const Tensor& dqkv = dqkv_ws_.get({batch_ * time_, 3 * width_}, type, dy.device());
	const Tensor dprobs = ops.causal_attention_uses_room(type) ? dprobs_ws_.get(scores_shape(), type, dy.device())
								    : Tensor();
	ops.causal_attention_backward(qkv_rows_, probs_, dy_rows, batch_, heads_, dprobs, dqkv);
	return qkv_.backward(dqkv, args);
}

} // namespace tower
