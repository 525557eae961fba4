// LayerNorm on the CPU: row statistics and normalization forward, and its three gradients.
#include <cmath>
#include <vector>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/cpu/vector_math.h"
#include "models/kernels/ops_checks.h"

namespace tower {

void CpuOps::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
			       const Tensor& mean, const Tensor& rstd) const
{
	const int64_t rows = check_layernorm(x, gamma, y, mean, rstd);
	expect_f32(beta, "layernorm bias");
	const int64_t c = x.dim(1);
	const float* g = gamma.data_as<float>();
	const float* b = beta.data_as<float>();
	// A row at a time: 16-bit rows are widened into `scratch` and rounded back from it.
	std::vector<float> scratch(x.dtype() == DType::f32 ? 0 : static_cast<size_t>(2 * c));
	for (int64_t r = 0; r < rows; ++r) {
		const F32Piece px(x, r * c, c, scratch.data(), true), py(y, r * c, c, scratch.data() + c, false);
		const float* __restrict in = px.data();
		float* __restrict out = py.data();
		// Two passes (mean, then the centred squares): one pass of x^2 - mean^2 loses the variance
		// of rows far from zero. Each sum in sixteen lanes: in one running sum the row ran at
		// the latency of its adds (LayerNorm was 3% of the fp32 GPT step, the sums most of it).
		const float m = lane_sum(c, [&](int64_t i) { return in[i]; }) / static_cast<float>(c);
		const float squares = lane_sum(c, [&](int64_t i) { return (in[i] - m) * (in[i] - m); });
		const float s = 1.0f / std::sqrt(squares / static_cast<float>(c) + eps);
		for (int64_t i = 0; i < c; ++i)
			out[i] = (in[i] - m) * s * g[i] + b[i];
		mean.data_as<float>()[r] = m;
		rstd.data_as<float>()[r] = s;
		py.store();
	}
}

void CpuOps::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
				const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
				bool accumulate) const
{
	const int64_t rows = check_layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
	const int64_t c = x.dim(1);
	std::vector<float> scratch(x.dtype() == DType::f32 ? 0 : static_cast<size_t>(3 * c));
	const float* g = gamma.data_as<float>();
	float* __restrict dg = dgamma.data_as<float>();
	float* __restrict db = dbeta.data_as<float>();
	if (!accumulate)
		for (int64_t i = 0; i < c; ++i)
			dg[i] = db[i] = 0.0f;
	for (int64_t r = 0; r < rows; ++r) {
		const F32Piece px(x, r * c, c, scratch.data(), true), pdy(dy, r * c, c, scratch.data() + c, true);
		const F32Piece pdx(dx, r * c, c, scratch.data() + 2 * c, false);
		const float* __restrict in = px.data();
		const float* __restrict d = pdy.data();
		float* __restrict out = pdx.data();
		const float m = mean.data_as<float>()[r], s = rstd.data_as<float>()[r];
		// With xhat = (x - mean) rstd and dn = dy gamma:
		// dx = rstd (dn - mean(dn) - xhat mean(dn xhat)). The row sums in sixteen lanes, as
		// forward; the gain and bias gradients in a loop of their own, which then vectorizes.
		const float dn_sum = lane_sum(c, [&](int64_t i) { return d[i] * g[i]; });
		const float dn_xhat_sum = lane_sum(c, [&](int64_t i) { return (d[i] * g[i]) * ((in[i] - m) * s); });
		for (int64_t i = 0; i < c; ++i) {
			dg[i] += d[i] * ((in[i] - m) * s);
			db[i] += d[i];
		}
		const float dn_mean = dn_sum / static_cast<float>(c), dn_xhat_mean = dn_xhat_sum / static_cast<float>(c);
		for (int64_t i = 0; i < c; ++i) {
			const float xhat = (in[i] - m) * s;
			out[i] = s * (d[i] * g[i] - dn_mean - xhat * dn_xhat_mean);
		}
		pdx.store();
	}
}

} // namespace tower
