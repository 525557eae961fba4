// Token and position embeddings: each input token's row of the token table plus its position's row.
#include "models/layers/token_embedding.h"

#include "models/init.h"
#include "models/kernels/ops.h"
#include "models/layers/precision.h"
#include "base/error.h"

namespace tower {

TokenEmbedding::TokenEmbedding(const std::string& prefix, int64_t vocab, int64_t context, int64_t width, float stddev,
			       float pos_stddev, uint64_t seed, const Device& device)
	: context_(context), width_(width), table_(make_normal(prefix + "wte", {vocab, width}, stddev, seed, device)),
	  positions_(make_normal(prefix + "wpe", {context, width}, pos_stddev, seed, device))
{
}

const Tensor& TokenEmbedding::forward(const Tensor& inputs, int64_t batch, DType dtype)
{
	TOWER_CHECK(batch > 0 && inputs.numel() % batch == 0 && inputs.numel() / batch <= context_,
		    "embedding of {} tokens as {} sequences: each must be at most the context of {}", inputs.numel(),
		    batch, context_);
	const Ops& ops = ops_for(inputs.device());
	const int64_t time = inputs.numel() / batch;
	inputs_ = inputs;
	batch_ = batch;
	table_work_ = working_value(table_, dtype, table_ws_);
	out_ = out_ws_.get({inputs.numel(), width_}, dtype, inputs.device());
	ops.embedding_forward(inputs, table_work_, out_);
	// The position rows, as a bias over each sequence's [T * width] values.
	const Tensor pos = working_value(positions_, dtype, positions_ws_).prefix({time * width_});
	ops.bias_act(out_.reshaped({batch, time * width_}), pos, 1, false);
	return out_;
}

void TokenEmbedding::backward(const Tensor& dx, const BackwardArgs& args)
{
	TOWER_CHECK(out_.data() != nullptr && dx.shape() == out_.shape(), "embedding backward of {} without a matching forward",
		    shape_text(dx.shape()));
	const int64_t time = dx.dim(0) / batch_;
	TOWER_CHECK(time == context_, "training needs windows of the whole context ({} positions), got {}", context_, time);
	const Ops& ops = ops_for(dx.device());
	const Tensor dpos = grad_buffer(positions_, dx.dtype(), dpos_ws_);
	ops.bias_grad(dx.reshaped({batch_, time * width_}), dpos.reshaped({time * width_}), 1,
		      accumulate_in_place(dpos, args));
	finish_grad(positions_, dpos, args);
	ops.embedding_backward(inputs_, dx, table_.grad, true);
	notify_ready(args, table_);
}

} // namespace tower
