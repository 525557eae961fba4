// Attention's own CPU operations: the whole causal attention in f32, the causal softmax and its
// gradient, and moving heads between layouts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "models/kernels/cpu/attention_f32.h"
#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/cpu_threads.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/cpu/vector_math.h"
#include "models/kernels/ops_checks.h"
#include "base/error.h"

namespace tower {

namespace {

// f32 runs on the kernels of attention_f32.cpp, one sequence and head at a time on one thread,
// where this CPU has them; with more threads per rank oneDNN's parallel products do better.
bool own_attention_kernels(DType type)
{
	return type == DType::f32 && cpu_threads() == 1 && attention_f32_available();
}

} // namespace

bool CpuOps::causal_attention_uses_room(DType type) const
{
	return !own_attention_kernels(type);
}

void CpuOps::causal_attention_forward(const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& scores,
				      const Tensor& probs, const Tensor& y) const
{
	if (!own_attention_kernels(qkv.dtype())) {
		Ops::causal_attention_forward(qkv, batch, heads, scores, probs, y);
		return;
	}
	const AttentionDims a = check_causal_attention(qkv, batch, heads, probs, y);
	attention_forward_f32({batch, a.time, heads, a.d}, qkv.data_as<float>(), probs.data_as<float>(),
			      y.data_as<float>());
}

void CpuOps::causal_attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t batch,
				       int64_t heads, const Tensor& dprobs, const Tensor& dqkv) const
{
	if (!own_attention_kernels(qkv.dtype())) {
		Ops::causal_attention_backward(qkv, probs, dy, batch, heads, dprobs, dqkv);
		return;
	}
	const AttentionDims a = check_causal_attention(qkv, batch, heads, probs, dy);
	expect_same_dtype(qkv, dqkv, "causal attention backward");
	TOWER_CHECK(dqkv.shape() == qkv.shape(), "attention's qkv gradient {} is not qkv's shape {}",
		    shape_text(dqkv.shape()), shape_text(qkv.shape()));
	attention_backward_f32({batch, a.time, heads, a.d}, qkv.data_as<float>(), probs.data_as<float>(),
			       dy.data_as<float>(), dqkv.data_as<float>());
}

void CpuOps::causal_softmax_forward(const Tensor& scores, float scale, const Tensor& probs) const
{
	check_causal_softmax(scores, probs);
	const int64_t n = scores.dim(0), t = scores.dim(1);
	// A row at a time: 16-bit rows are widened into `scratch` and rounded back from it.
	std::vector<float> scratch(scores.dtype() == DType::f32 ? 0 : static_cast<size_t>(2 * t));
	for (int64_t row = 0; row < n * t; ++row) {
		const int64_t i = row % t; // the query's position: it sees keys 0..i
		const F32Piece ps(scores, row * t, t, scratch.data(), true), pp(probs, row * t, t, scratch.data() + t, false);
		const float* __restrict s = ps.data();
		float* __restrict p = pp.data();
		float top = s[0];
		for (int64_t j = 1; j <= i; ++j)
			top = std::max(top, s[j]);
		exp_shifted_f32(s, top, scale, p, i + 1);
		float sum = 0.0f;
		for (int64_t j = 0; j <= i; ++j)
			sum += p[j];
		const float inv = 1.0f / sum;
		for (int64_t j = 0; j <= i; ++j)
			p[j] *= inv;
		std::fill(p + i + 1, p + t, 0.0f);
		pp.store();
	}
}

void CpuOps::causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
				     const Tensor& dscores) const
{
	check_causal_softmax(probs, dprobs);
	check_causal_softmax(probs, dscores);
	const int64_t n = probs.dim(0), t = probs.dim(1);
	// dscores may be dprobs: each row reads all of dprobs' row before writing it.
	std::vector<float> scratch(probs.dtype() == DType::f32 ? 0 : static_cast<size_t>(3 * t));
	for (int64_t row = 0; row < n * t; ++row) {
		const int64_t i = row % t;
		const F32Piece pp(probs, row * t, t, scratch.data(), true), pdp(dprobs, row * t, t, scratch.data() + t, true);
		const F32Piece pds(dscores, row * t, t, scratch.data() + 2 * t, false);
		const float* __restrict p = pp.data();
		const float* dp = pdp.data();
		float* ds = pds.data();
		float dot = 0.0f;
		for (int64_t j = 0; j <= i; ++j)
			dot += p[j] * dp[j];
		for (int64_t j = 0; j <= i; ++j)
			ds[j] = scale * p[j] * (dp[j] - dot);
		std::fill(ds + i + 1, ds + t, 0.0f);
		pds.store();
	}
}

void CpuOps::permute_heads(const Tensor& rows, int64_t offset, const Tensor& heads, bool to_heads) const
{
	check_permute_heads(rows, offset, heads);
	const int64_t b = heads.dim(0), h = heads.dim(1), t = heads.dim(2), d = heads.dim(3), w = rows.dim(2);
	const size_t elem = dtype_size(rows.dtype());
	auto* r = static_cast<char*>(rows.data());
	auto* hd = static_cast<char*>(heads.data());
	// Whole head vectors (D contiguous elements on both sides) move with one copy each.
	for (int64_t bi = 0; bi < b; ++bi)
		for (int64_t hi = 0; hi < h; ++hi)
			for (int64_t ti = 0; ti < t; ++ti) {
				char* row = r + static_cast<size_t>((bi * t + ti) * w + offset + hi * d) * elem;
				char* head = hd + static_cast<size_t>(((bi * h + hi) * t + ti) * d) * elem;
				if (to_heads)
					std::memcpy(head, row, static_cast<size_t>(d) * elem);
				else
					std::memcpy(row, head, static_cast<size_t>(d) * elem);
			}
}

} // namespace tower
