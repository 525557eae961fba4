// The fused operations' defaults: their parts one after another, for a backend or a type without a
// fused kernel (CUDA; on the CPU the 16-bit residual adds). The results are those of the parts,
// rounded between them. GELU's kept slope has no parts to fall back on: its defaults refuse (a
// layer asks gelu_keeps_slope first).
#include "models/kernels/ops.h"

#include "base/error.h"

namespace tower {

void Ops::gemm_bias_act(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu,
			const Tensor& c) const
{
	gemm(ta, tb, 1.0f, a, b, 0.0f, c);
	bias_act(c, bias, 1, relu);
}

void Ops::gelu_backward_bias_grad(const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& db,
				  bool accumulate) const
{
	gelu_backward(x, dy, dx);
	bias_grad(dx, db, 1, accumulate);
}

void Ops::gelu_forward_slope(const Tensor& x, const Tensor&) const
{
	throw Error(fmt::format("gelu_forward_slope: the {} backend keeps GELU's input for its backward, not its slope "
				"(gelu_keeps_slope is false for {})",
				x.device().name(), dtype_name(x.dtype())));
}

void Ops::slope_backward_bias_grad(const Tensor& slope, const Tensor&, const Tensor&, const Tensor&, bool) const
{
	throw Error(fmt::format("slope_backward_bias_grad: the {} backend keeps GELU's input for its backward, not its "
				"slope (gelu_keeps_slope is false for {})",
				slope.device().name(), dtype_name(slope.dtype())));
}

void Ops::add_layernorm_forward(const Tensor& a, const Tensor& b, const Tensor& gamma, const Tensor& beta, float eps,
				const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) const
{
	if (sum.data() != a.data())
		cast(a, sum, false);
	accumulate(1.0f, b, sum);
	layernorm_forward(sum, gamma, beta, eps, y, mean, rstd);
}

void Ops::layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
				 const Tensor& rstd, const Tensor& residual, const Tensor& dx, const Tensor& dgamma,
				 const Tensor& dbeta, bool accumulate) const
{
	layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, accumulate);
	this->accumulate(1.0f, residual, dx);
}

} // namespace tower
