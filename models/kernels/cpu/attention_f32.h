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

// Whether this build and CPU run the kernels below: GCC on x86-64 and AVX-512F, unless
// ONEDNN_MAX_CPU_ISA holds oneDNN below AVX-512 (the cap then holds these kernels too, so the avx2
// tests run the other path).
bool attention_f32_available();

// probs = causal softmax(q k^T / sqrt(d)) (0 above the diagonal), y = probs v.
void attention_forward_f32(const AttentionShape& s, const float* qkv, float* probs, float* y);
// dqkv (every element written) from dy and the forward's qkv and probs.
void attention_backward_f32(const AttentionShape& s, const float* qkv, const float* probs, const float* dy,
			    float* dqkv);

} // namespace tower
