// LayerNorm on the CPU: row statistics and normalization forward, and its three gradients; the
// residual adds beside it in the same pass over the rows.
#include <cmath>
#include <vector>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/cpu/vector_math.h"
#include "models/kernels/ops_checks.h"
#include "base/error.h"

namespace tower {

namespace {

// One row of c values: out = (in - mean) * rstd * g + b; returns mean and rstd.
void normalize_row(const float* __restrict in, int64_t c, const float* g, const float* b, float eps,
		   float* __restrict out, float& mean, float& rstd)
{
	// Two passes (mean, then the centred squares): one pass of x^2 - mean^2 loses the variance
	// of rows far from zero. Each sum in sixteen lanes: in one running sum the row ran at
	// the latency of its adds (LayerNorm was 3% of the fp32 GPT step, the sums most of it).
	const float m = lane_sum(c, [&](int64_t i) { return in[i]; }) / static_cast<float>(c);
	const float squares = lane_sum(c, [&](int64_t i) { return (in[i] - m) * (in[i] - m); });
	const float s = 1.0f / std::sqrt(squares / static_cast<float>(c) + eps);
	for (int64_t i = 0; i < c; ++i)
		out[i] = (in[i] - m) * s * g[i] + b[i];
	mean = m;
	rstd = s;
}

// One row's dx from dy and x (mean m, rstd s), its gain and bias gradients added to dg and db.
void normalize_row_backward(const float* __restrict in, const float* __restrict d, int64_t c, const float* g,
			    float m, float s, float* __restrict out, float* __restrict dg, float* __restrict db)
{
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
}

void zero_unless(bool accumulate, float* dg, float* db, int64_t c)
{
	if (!accumulate)
		for (int64_t i = 0; i < c; ++i)
			dg[i] = db[i] = 0.0f;
}

} // namespace

void CpuOps::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
			       const Tensor& mean, const Tensor& rstd) const
{
	const int64_t rows = check_layernorm(x, gamma, y, mean, rstd);
	expect_f32(beta, "layernorm bias");
	const int64_t c = x.dim(1);
	// A row at a time: 16-bit rows are widened into `scratch` and rounded back from it.
	std::vector<float> scratch(x.dtype() == DType::f32 ? 0 : static_cast<size_t>(2 * c));
	for (int64_t r = 0; r < rows; ++r) {
		const F32Piece px(x, r * c, c, scratch.data(), true), py(y, r * c, c, scratch.data() + c, false);
		normalize_row(px.data(), c, gamma.data_as<float>(), beta.data_as<float>(), eps, py.data(),
			      mean.data_as<float>()[r], rstd.data_as<float>()[r]);
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
	zero_unless(accumulate, dgamma.data_as<float>(), dbeta.data_as<float>(), c);
	for (int64_t r = 0; r < rows; ++r) {
		const F32Piece px(x, r * c, c, scratch.data(), true), pdy(dy, r * c, c, scratch.data() + c, true);
		const F32Piece pdx(dx, r * c, c, scratch.data() + 2 * c, false);
		normalize_row_backward(px.data(), pdy.data(), c, gamma.data_as<float>(), mean.data_as<float>()[r],
				       rstd.data_as<float>()[r], pdx.data(), dgamma.data_as<float>(), dbeta.data_as<float>());
		pdx.store();
	}
}

void CpuOps::add_layernorm_forward(const Tensor& a, const Tensor& b, const Tensor& gamma, const Tensor& beta, float eps,
				   const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) const
{
	// 16-bit sums are rounded before they are normalized: the parts do that.
	if (a.dtype() != DType::f32) {
		Ops::add_layernorm_forward(a, b, gamma, beta, eps, sum, y, mean, rstd);
		return;
	}
	const int64_t rows = check_layernorm(sum, gamma, y, mean, rstd);
	expect_f32(beta, "layernorm bias");
	for (const Tensor* t : {&a, &b}) {
		expect_same_dtype(*t, sum, "residual add");
		TOWER_CHECK(t->shape() == sum.shape(), "residual add: {} is not the sum's shape {}", shape_text(t->shape()),
			    shape_text(sum.shape()));
	}
	const int64_t c = sum.dim(1);
	// The row's sum is written (it may be a's own row), then normalized while in cache.
	for (int64_t r = 0; r < rows; ++r) {
		const float* ra = a.data_as<float>() + r * c;
		const float* rb = b.data_as<float>() + r * c;
		float* rs = sum.data_as<float>() + r * c;
		for (int64_t i = 0; i < c; ++i)
			rs[i] = ra[i] + rb[i];
		normalize_row(rs, c, gamma.data_as<float>(), beta.data_as<float>(), eps, y.data_as<float>() + r * c,
			      mean.data_as<float>()[r], rstd.data_as<float>()[r]);
	}
}

void CpuOps::layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
				    const Tensor& rstd, const Tensor& residual, const Tensor& dx, const Tensor& dgamma,
				    const Tensor& dbeta, bool accumulate) const
{
	if (x.dtype() != DType::f32) {
		Ops::layernorm_backward_add(dy, x, gamma, mean, rstd, residual, dx, dgamma, dbeta, accumulate);
		return;
	}
	const int64_t rows = check_layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
	expect_same_dtype(residual, dx, "residual gradient");
	TOWER_CHECK(residual.shape() == dx.shape(), "residual gradient {} is not dx's shape {}",
		    shape_text(residual.shape()), shape_text(dx.shape()));
	const int64_t c = x.dim(1);
	zero_unless(accumulate, dgamma.data_as<float>(), dbeta.data_as<float>(), c);
	for (int64_t r = 0; r < rows; ++r) {
		float* out = dx.data_as<float>() + r * c;
		normalize_row_backward(x.data_as<float>() + r * c, dy.data_as<float>() + r * c, c, gamma.data_as<float>(),
				       mean.data_as<float>()[r], rstd.data_as<float>()[r], out, dgamma.data_as<float>(),
				       dbeta.data_as<float>());
		// Added once the row is written, as accumulate adds it: the same rounding, no fused
		// multiply-add across the two.
		const float* res = residual.data_as<float>() + r * c;
		for (int64_t i = 0; i < c; ++i)
			out[i] += res[i];
	}
}

} // namespace tower
