// Token embeddings on the CPU: windows into inputs and targets, the table lookup and its gradient.
#include <algorithm>
#include <cstring>
#include <vector>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/ops_checks.h"
#include "base/error.h"

namespace tower {

namespace {

int64_t checked_token(const int32_t* tokens, int64_t n, int64_t vocab)
{
	const int64_t v = tokens[n];
	TOWER_CHECK(v >= 0 && v < vocab, "token {} at position {} is outside the vocabulary [0, {})", v, n, vocab);
	return v;
}

} // namespace

void CpuOps::split_windows(const Tensor& windows, const Tensor& inputs, const Tensor& targets) const
{
	check_split_windows(windows, inputs, targets);
	const int64_t b = windows.dim(0), t = windows.dim(1) - 1;
	const int32_t* w = windows.data_as<int32_t>();
	for (int64_t i = 0; i < b; ++i) {
		std::copy_n(w + i * (t + 1), t, inputs.data_as<int32_t>() + i * t);
		std::copy_n(w + i * (t + 1) + 1, t, targets.data_as<int32_t>() + i * t);
	}
}

void CpuOps::embedding_forward(const Tensor& tokens, const Tensor& table, const Tensor& out) const
{
	check_embedding(tokens, table, out, false);
	const int64_t n = tokens.numel(), vocab = table.dim(0);
	const size_t row_bytes = static_cast<size_t>(table.dim(1)) * dtype_size(table.dtype());
	const auto* src = static_cast<const char*>(table.data());
	auto* dst = static_cast<char*>(out.data());
	for (int64_t i = 0; i < n; ++i) {
		const int64_t v = checked_token(tokens.data_as<int32_t>(), i, vocab);
		std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(v) * row_bytes, row_bytes);
	}
}

void CpuOps::embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable, bool accumulate) const
{
	check_embedding(tokens, dtable, dout, true);
	const int64_t n = tokens.numel(), vocab = dtable.dim(0), c = dtable.dim(1);
	float* table = dtable.data_as<float>();
	if (!accumulate)
		std::fill_n(table, dtable.numel(), 0.0f);
	std::vector<float> scratch(dout.dtype() == DType::f32 ? 0 : static_cast<size_t>(c));
	// In token order: the same sums in the same order on every run and rank count.
	for (int64_t i = 0; i < n; ++i) {
		const int64_t v = checked_token(tokens.data_as<int32_t>(), i, vocab);
		float* __restrict row = table + v * c;
		const F32Piece pd(dout, i * c, c, scratch.data(), true);
		const float* __restrict g = pd.data();
		for (int64_t j = 0; j < c; ++j)
			row[j] += g[j];
	}
}

} // namespace tower
