// Elementwise CPU ops: fill, accumulate, bias with optional ReLU, bias gradient, ReLU.
#include <algorithm>

#include "models/cpu/cpu_ops.h"
#include "models/ops_checks.h"

namespace tower {

void CpuOps::fill(const Tensor& x, float value) const
{
	expect_f32(x, "filled tensor");
	std::fill_n(x.data_as<float>(), x.numel(), value);
}

void CpuOps::accumulate(float alpha, const Tensor& x, const Tensor& y) const
{
	expect_f32(x, "accumulated tensor");
	expect_f32(y, "accumulator");
	expect_same_numel(x, y, "accumulate");
	const float* __restrict xs = x.data_as<float>();
	float* __restrict ys = y.data_as<float>();
	const int64_t n = x.numel();
	for (int64_t i = 0; i < n; ++i)
		ys[i] += alpha * xs[i];
}

void CpuOps::bias_act(const Tensor& y, const Tensor& bias, int64_t inner, bool relu) const
{
	const int64_t outer = checked_bias_outer(y, bias, inner);
	const int64_t channels = bias.numel();
	const float* __restrict b = bias.data_as<float>();
	float* __restrict row = y.data_as<float>();
	// One pass over y: the bias and the ReLU are applied while the row is in cache. The loops
	// run along the contiguous dimension so they vectorize: across channels for linear layers
	// (inner 1), across pixels for convolutions.
	if (inner == 1) {
		for (int64_t o = 0; o < outer; ++o, row += channels)
			if (relu)
				for (int64_t c = 0; c < channels; ++c)
					row[c] = std::max(row[c] + b[c], 0.0f);
			else
				for (int64_t c = 0; c < channels; ++c)
					row[c] += b[c];
		return;
	}
	for (int64_t o = 0; o < outer; ++o) {
		for (int64_t c = 0; c < channels; ++c, row += inner) {
			const float bc = b[c];
			if (relu)
				for (int64_t i = 0; i < inner; ++i)
					row[i] = std::max(row[i] + bc, 0.0f);
			else
				for (int64_t i = 0; i < inner; ++i)
					row[i] += bc;
		}
	}
}

void CpuOps::bias_grad(const Tensor& dy, const Tensor& db, int64_t inner, bool accumulate) const
{
	const int64_t outer = checked_bias_outer(dy, db, inner);
	const int64_t channels = db.numel();
	float* __restrict g = db.data_as<float>();
	const float* __restrict row = dy.data_as<float>();
	if (!accumulate)
		std::fill_n(g, channels, 0.0f);
	if (inner == 1) {
		// Linear layers: add whole rows so the loop vectorizes across channels.
		for (int64_t o = 0; o < outer; ++o, row += channels)
			for (int64_t c = 0; c < channels; ++c)
				g[c] += row[c];
		return;
	}
	for (int64_t o = 0; o < outer; ++o)
		for (int64_t c = 0; c < channels; ++c, row += inner) {
			float sum = 0.0f;
			for (int64_t i = 0; i < inner; ++i)
				sum += row[i];
			g[c] += sum;
		}
}

void CpuOps::relu_forward(const Tensor& x, const Tensor& y) const
{
	expect_f32(x, "relu input");
	expect_f32(y, "relu output");
	expect_same_numel(x, y, "relu");
	const float* xs = x.data_as<float>();
	float* ys = y.data_as<float>();
	const int64_t n = x.numel();
	for (int64_t i = 0; i < n; ++i)
		ys[i] = std::max(xs[i], 0.0f);
}

void CpuOps::relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const
{
	expect_f32(y, "relu output");
	expect_f32(dy, "relu output gradient");
	expect_f32(dx, "relu input gradient");
	expect_same_numel(y, dy, "relu backward");
	expect_same_numel(y, dx, "relu backward");
	const float* __restrict ys = y.data_as<float>();
	const float* __restrict g = dy.data_as<float>();
	float* __restrict out = dx.data_as<float>();
	const int64_t n = y.numel();
	for (int64_t i = 0; i < n; ++i)
		out[i] = ys[i] > 0.0f ? g[i] : 0.0f;
}

} // namespace tower
