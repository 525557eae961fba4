// Multi-head causal self-attention: one projection to queries, keys and values, scaled dot-product
// attention in which each position sees itself and the positions before it, and an output projection.
#pragma once

#include <string>

#include "models/layers/linear.h"
#include "models/layers/workspace.h"
#include "models/kernels/ops.h"

namespace tower {

// Attention goes by blocks of this many positions: block i of queries sees the keys of blocks 0..i
// only, so at T = 128 the products cover 5/8 of the T x T square rather than all of it.
constexpr int64_t causal_block_positions = 32;

// The share of the T x T products the blocks compute at context t.
double causal_block_share(int64_t t);

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
	// The heads of rows [B * T, W'] from column col0 on, one matrix [T, head width] per sequence
	// and head, in the order of the scores' items (sequence-major).
	MatrixBatch heads_of(const Tensor& rows, int64_t col0) const;
	// A block of every item of the scores [B * heads, T, T], grouped by sequence like heads_of.
	MatrixBatch scores_block(const Tensor& scores, int64_t row0, int64_t rows, int64_t col0, int64_t cols) const;
	// The products by causal blocks of rows (queries) or columns (keys), skipping the blocks
	// above the diagonal, where every probability is 0.
	void scores_forward(const Ops& ops, const Tensor& scores) const;
	void values_forward(const Ops& ops, const Tensor& y) const;
	void values_backward(const Ops& ops, const Tensor& dy, const Tensor& dprobs, const Tensor& dqkv) const;
	void scores_backward(const Ops& ops, const Tensor& dscores, const Tensor& dqkv) const;

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
