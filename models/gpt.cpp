// A byte-level GPT: decoder-only, pre-LayerNorm, with the language-model head tied to the token embedding.
#include "models/gpt.h"

#include <algorithm>

#include <fmt/format.h>

#include "models/kernels/ops.h"
#include "base/error.h"

namespace tower {

GptModel::GptModel(const GptOptions& o, const Device& device)
	: options_(o), device_(device), embedding_("", o.vocab, o.context, o.width, 0.02f, 0.01f, o.seed, device),
	  final_norm_("lnf", o.width, device)
{
	TOWER_CHECK(o.precision == DType::f32 || o.precision == DType::f16 || o.precision == DType::bf16,
		    "a model computes in f32, f16 or bf16, not {}", dtype_name(o.precision));
	for (int64_t i = 0; i < o.layers; ++i)
		blocks_.push_back(std::make_unique<TransformerBlock>(fmt::format("h{}.", i),
								     BlockShape{o.width, o.heads, o.layers}, o.seed, device));
}

std::vector<Parameter*> GptModel::parameters()
{
	std::vector<Parameter*> all = embedding_.parameters();
	for (auto& block : blocks_)
		for (Parameter* p : block->parameters())
			all.push_back(p);
	for (Parameter* p : final_norm_.parameters())
		all.push_back(p);
	return all;
}

const Tensor& GptModel::logits(const Tensor& inputs, int64_t batch)
{
	const Ops& ops = ops_for(device_);
	Residual x{&embedding_.forward(inputs, batch, options_.precision), nullptr};
	for (auto& block : blocks_)
		x = block->forward(x, batch);
	xf_ = normalize_residual(final_norm_, x);
	// The head is the token table transposed (tied weights): logits = xf wte^T.
	logits_ = logits_ws_.get({xf_.dim(0), options_.vocab}, options_.precision, device_);
	ops.gemm(Transpose::no, Transpose::yes, 1.0f, xf_, embedding_.working_table(), 0.0f, logits_);
	return logits_;
}

ForwardResult GptModel::forward(const Batch& batch)
{
	const Tensor& windows = batch.get("tokens");
	TOWER_CHECK(windows.dtype() == DType::i32 && windows.rank() == 2 && windows.dim(1) == options_.context + 1,
		    "gpt reads \"tokens\" as i32 [B, {}] (windows of context + 1), got {} {}", options_.context + 1,
		    dtype_name(windows.dtype()), shape_text(windows.shape()));
	TOWER_CHECK(windows.device().kind == device_.kind && windows.device().index == device_.index,
		    "the model lives on {} but its tokens are on {}", device_.name(), windows.device().name());
	batch_ = windows.dim(0);
	const int64_t n = batch_ * options_.context;
	inputs_ = inputs_ws_.get({n}, DType::i32, device_);
	targets_ = targets_ws_.get({n}, DType::i32, device_);
	ops_for(device_).split_windows(windows, inputs_, targets_);
	const XentResult r = loss_.forward(logits(inputs_, batch_), targets_);
	have_forward_ = true;
	return {r.loss, -1};
}

void GptModel::backward(const GradReadyFn& on_ready, const BackwardOptions& options)
{
	TOWER_CHECK(have_forward_, "backward needs a forward first");
	const Ops& ops = ops_for(device_);
	BackwardArgs args;
	args.accumulate = options.accumulate;
	args.on_ready = &on_ready;
	const Tensor& dlogits = loss_.backward(options.loss_scale);
	// The tied head's part of the token table's gradient comes first; the embedding adds its own.
	Parameter& table = embedding_.table();
	const float beta = options.accumulate ? 1.0f : 0.0f;
	if (options_.precision == DType::f32) {
		ops.gemm(Transpose::yes, Transpose::no, 1.0f, dlogits, xf_, beta, table.grad);
	} else if (!ops.gemm_into_f32(Transpose::yes, Transpose::no, 1.0f, dlogits, xf_, beta, table.grad)) {
		dhead_ = dhead_ws_.get(table.grad.shape(), options_.precision, device_);
		ops.gemm(Transpose::yes, Transpose::no, 1.0f, dlogits, xf_, 0.0f, dhead_);
		ops.cast(dhead_, table.grad, options.accumulate);
	}
	dxf_ = dxf_ws_.get(xf_.shape(), options_.precision, device_);
	ops.gemm(Transpose::no, Transpose::no, 1.0f, dlogits, embedding_.working_table(), 0.0f, dxf_);
	args.need_input_grad = true;
	const Tensor* dx = &final_norm_.backward(dxf_, args);
	for (size_t i = blocks_.size(); i-- > 0;)
		dx = &blocks_[i]->backward(*dx, args);
	embedding_.backward(*dx, args);
}

std::vector<float> GptModel::next_token_logits(const std::vector<int32_t>& tokens)
{
	TOWER_CHECK(!tokens.empty(), "the next token needs at least one token before it");
	const size_t keep = std::min(tokens.size(), static_cast<size_t>(options_.context));
	const std::vector<int32_t> window(tokens.end() - static_cast<std::ptrdiff_t>(keep), tokens.end());
	Tensor host = Tensor::empty({static_cast<int64_t>(keep)}, DType::i32, Device{});
	std::copy(window.begin(), window.end(), host.data_as<int32_t>());
	Tensor inputs = Tensor::empty(host.shape(), DType::i32, device_);
	inputs.copy_from(host);
	const Tensor& all = logits(inputs, 1);
	const std::vector<float> values = all.to_host_f32();
	have_forward_ = false; // a window shorter than the context cannot be differentiated
	return {values.end() - options_.vocab, values.end()};
}

std::unique_ptr<GptModel> make_gpt(const GptOptions& o, const Device& device)
{
	const auto expect = [](bool ok, const std::string& what) {
		if (!ok)
			throw AgreedError(what);
	};
	expect(o.layers >= 1, fmt::format("`layers` {} must be at least 1", o.layers));
	expect(o.width >= 1, fmt::format("`width` {} must be at least 1", o.width));
	expect(o.heads >= 1 && o.width % o.heads == 0,
	       fmt::format("`heads` {} must divide `width` {} (each head is width / heads wide)", o.heads, o.width));
	expect(o.context >= 1, fmt::format("`context` {} must be at least 1", o.context));
	expect(o.vocab >= 1, fmt::format("a vocabulary of {} tokens is empty", o.vocab));
	return std::make_unique<GptModel>(o, device);
}

} // namespace tower
