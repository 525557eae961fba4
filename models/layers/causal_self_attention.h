// Multi-head causal self-attention: one projection to queries, keys and values, scaled dot-product
// attention in which each position sees itself and the positions before it, and an output projection.
#pragma once

#include <string>

#include "models/layers/linear.h"
#include "models/layers/workspace.h"
#include "models/kernels/ops.h"

namespace tower {

class CausalSelfAttention {
public:
	// qkv: [3 * width, width] and [3 * width] (queries, keys, values in that order, each split
	// into `heads` heads of width / heads); proj: [width, width] and [width].
	CausalSelfAttention(int64_t width, int64_t heads, Linear qkv, Linear proj);

	std::vector<Parameter*> parameters();
	// x: [batch * T, width], batch sequences of T positions each.
	const Tensor& forward(const Tensor& x, int64_t batch);
	// Parameter gradients as Layer::backward; returns the gradient of the last forward's x.
	const Tensor& backward(const Tensor& dy, const BackwardArgs& args);

private:
	Shape scores_shape() const { return {batch_ * heads_, time_, time_}; }

	int64_t width_;
	int64_t heads_;
	Linear qkv_;
	Linear proj_;
	int64_t batch_ = 0;
	int64_t time_ = 0;
	Tensor qkv_rows_, probs_;
	Workspace scores_ws_, probs_ws_, y_ws_, dprobs_ws_, dqkv_ws_;
};

} // namespace tower
