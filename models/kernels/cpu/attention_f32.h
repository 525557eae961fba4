// Causal self-attention in f32 one sequence and head at a time, on AVX-512 register tiles.
#pragma once

#include <cstdint>

namespace tower {

// The layout both passes read and write: queries, keys and values side by side in the rows of qkv
// [batch * time, 3 * heads * d], the output (and its gradient) in rows [batch * time, heads * d],
// the probabilities as [batch * heads, time, time].
struct AttentionShape {
	int64_t batch, time, heads, d;
};

// Whether this CPU runs the kernels below: AVX-512F, unless ONEDNN_MAX_CPU_ISA holds oneDNN below
// AVX-512 (the cap then holds these kernels too, so the avx2 tests run the other path).
bool attention_f32_available();

// probs = causal softmax(q k^T / sqrt(d)), y = probs v. Above the diagonal probs holds 0 within
// each tile of 8 rows (what the products read) and is not written after it.
void attention_forward_f32(const AttentionShape& s, const float* qkv, float* probs, float* y);
// dqkv (every element written) from dy and the forward's qkv and probs.
void attention_backward_f32(const AttentionShape& s, const float* qkv, const float* probs, const float* dy,
			    float* dqkv);

} // namespace tower
