// Row-major f32 GEMM on the CPU through OpenBLAS.
#include <cblas.h>

#include "models/cpu/cpu_ops.h"
#include "models/ops_checks.h"

namespace tower {

void CpuOps::gemm(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
		  const Tensor& c) const
{
	const GemmDims d = checked_gemm_dims(ta, tb, a, b, c);
	for (const Tensor* t : {&a, &b, &c})
		expect_on(*t, Device{}, "gemm operand");
	if (d.m == 0 || d.n == 0)
		return;
	// The transposes go to sgemm as flags: no operand is ever copied to transpose it.
	cblas_sgemm(CblasRowMajor, ta == Transpose::yes ? CblasTrans : CblasNoTrans,
		    tb == Transpose::yes ? CblasTrans : CblasNoTrans, static_cast<blasint>(d.m),
		    static_cast<blasint>(d.n), static_cast<blasint>(d.k), alpha, a.data_as<float>(),
		    static_cast<blasint>(a.dim(1)), b.data_as<float>(), static_cast<blasint>(b.dim(1)), beta,
		    c.data_as<float>(), static_cast<blasint>(c.dim(1)));
}

} // namespace tower
