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

// A residual stream's value as branch + stream, not yet added: the LayerNorm that reads it adds
// them in its own pass (LayerNorm::forward_add) and writes the sum into the branch, which must be
// a buffer its producer's backward never reads. No stream: the value is the branch itself.
struct Residual {
	const Tensor* branch = nullptr;
	const Tensor* stream = nullptr;
};

// The LayerNorm of a residual value: forward_add where it is a sum, else forward.
const Tensor& normalize_residual(LayerNorm& norm, const Residual& x);

class TransformerBlock {
public:
	// Parameters "<prefix>ln1", "<prefix>attn.qkv", "<prefix>attn.proj", "<prefix>ln2",
	// "<prefix>mlp.fc" (width -> 4 width) and "<prefix>mlp.proj"; weights Normal(0, 0.02), the
	// two projections into the residual stream Normal(0, 0.02 / sqrt(2 layers)) as in GPT-2,
	// biases zero.
	TransformerBlock(const std::string& prefix, const BlockShape& shape, uint64_t seed, const Device& device);

	std::vector<Parameter*> parameters();
	// The block's input x: [batch * T, width], as the previous block leaves it (Residual); its
	// output likewise, branch + stream, the sum left to the next LayerNorm's pass (into the
	// branch's memory, the block's own, which lives until its next forward).
	Residual forward(const Residual& x, int64_t batch);
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
