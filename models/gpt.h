// A byte-level GPT: decoder-only, pre-LayerNorm, with the language-model head tied to the token embedding.
#pragma once

#include <memory>
#include <vector>

#include "models/layers/layer_norm.h"
#include "models/layers/softmax_xent.h"
#include "models/layers/token_embedding.h"
#include "models/layers/workspace.h"
#include "models/model.h"
#include "models/transformer_block.h"

namespace tower {

struct GptOptions {
	int64_t vocab = 256; // bytes
	int64_t context = 128;
	int64_t layers = 4;
	int64_t width = 256;
	int64_t heads = 4;
	uint64_t seed = 0;
	DType precision = DType::f32;
};

class GptModel final : public Model {
public:
	GptModel(const GptOptions& options, const Device& device);

	// wte, wpe, then each block's (h0.ln1 ... h0.mlp.proj, h1. ...), then lnf.
	std::vector<Parameter*> parameters() override;
	// Reads the batch's "tokens", i32 [B, context + 1] windows: predicts tokens 1..context of each
	// from the ones before; the loss is the mean next-token cross-entropy over all B * context
	// predictions (correct is -1: evaluation reports perplexity).
	ForwardResult forward(const Batch& batch) override;
	void backward(const GradReadyFn& on_ready, const BackwardOptions& options) override;
	DType precision() const override { return options_.precision; }

	const GptOptions& options() const { return options_; }
	// Inference: the logits (f32 [vocab]) of the token after the last of `tokens` (host bytes,
	// at most context of them; earlier ones are dropped).
	std::vector<float> next_token_logits(const std::vector<int32_t>& tokens);

private:
	// The logits [B * T, vocab] (compute type) of inputs (i32 [B * T] on the device).
	const Tensor& logits(const Tensor& inputs, int64_t batch);

	GptOptions options_;
	Device device_;
	TokenEmbedding embedding_;
	std::vector<std::unique_ptr<TransformerBlock>> blocks_;
	LayerNorm final_norm_;
	SoftmaxCrossEntropy loss_;
	Tensor inputs_, targets_, xf_, logits_, dxf_, dhead_;
	Workspace inputs_ws_, targets_ws_, logits_ws_, dxf_ws_, dhead_ws_;
	int64_t batch_ = 0;
	bool have_forward_ = false;
};

// Throws tower::AgreedError naming the option for a shape that cannot be built (heads not
// dividing the width, a context or size below 1).
std::unique_ptr<GptModel> make_gpt(const GptOptions& options, const Device& device);

} // namespace tower
