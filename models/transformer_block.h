// One pre-LayerNorm transformer block: x + attention(ln1(x)), then that + mlp(ln2(that)).
#pragma once

#include <string>

#include "models/layers/causal_self_attention.h"
#include "models/layers/layer_norm.h"
#include "models/layers/linear.h"

namespace tower {

struct BlockShape {
	int64_t width = 0;
	int64_t heads = 0;
	int64_t layers = 0; // of the whole model: the residual projections' initialization shrinks with it
};

class TransformerBlock {
public:
	// Parameters "<prefix>ln1", "<prefix>attn.qkv", "<prefix>attn.proj", "<prefix>ln2",
	// "<prefix>mlp.fc" (width -> 4 width) and "<prefix>mlp.proj"; weights Normal(0, 0.02), the
	// two projections into the residual stream Normal(0, 0.02 / sqrt(2 layers)) as in GPT-2,
	// biases zero.
	TransformerBlock(const std::string& prefix, const BlockShape& shape, uint64_t seed, const Device& device);

	std::vector<Parameter*> parameters();
	// x: [batch * T, width]; the result lives in the block's memory until its next forward.
	const Tensor& forward(const Tensor& x, int64_t batch);
	// The gradient of the last forward's x, given the output's.
	const Tensor& backward(const Tensor& dy, const BackwardArgs& args);

private:
	LayerNorm ln1_;
	CausalSelfAttention attn_;
	LayerNorm ln2_;
	Linear fc_; // with its GELU
	Linear proj_;
};

} // namespace tower
