// The fused operations' defaults: their parts one after another, for a backend without a fused
// kernel (CUDA today). The results are those of the parts, rounded between them.
#include "models/kernels/ops.h"

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

} // namespace tower
