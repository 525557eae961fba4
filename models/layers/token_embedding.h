// Token and position embeddings: each input token's row of the token table plus its position's row.
#pragma once

#include <string>

#include "models/layers/layer.h"
#include "models/layers/workspace.h"

namespace tower {

class TokenEmbedding {
public:
	// "<prefix>wte" [vocab, width] and "<prefix>wpe" [context, width], both Normal(0, stddev);
	// `pos_stddev` for the positions (GPT-2: 0.02 and 0.01).
	TokenEmbedding(const std::string& prefix, int64_t vocab, int64_t context, int64_t width, float stddev,
		       float pos_stddev, uint64_t seed, const Device& device);

	std::vector<Parameter*> parameters() { return {&table_, &positions_}; }
	// The token table, which a tied language-model head reads and adds its gradient to.
	Parameter& table() { return table_; }
	// The token table in the compute type of the last forward (the head multiplies by it).
	const Tensor& working_table() const { return table_work_; }

	// inputs: i32 [batch * T] with T <= context; returns [batch * T, width] of `dtype`.
	const Tensor& forward(const Tensor& inputs, int64_t batch, DType dtype);
	// Adds the lookups' gradient to table().grad (which the caller has set for this step: the tied
	// head writes it first) and writes the positions' gradient; T must be the whole context.
	void backward(const Tensor& dx, const BackwardArgs& args);

private:
	int64_t context_;
	int64_t width_;
	Parameter table_;
	Parameter positions_;
	Tensor inputs_;
	Tensor table_work_;
	Tensor out_;
	int64_t batch_ = 0;
	Workspace table_ws_, positions_ws_, out_ws_, dpos_ws_;
};

} // namespace tower
