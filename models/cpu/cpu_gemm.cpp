// Row-major GEMM on the CPU through OpenBLAS sgemm; 16-bit operands are widened to f32 around it.
#include <cblas.h>

#include "models/cpu/cpu_ops.h"
#include "models/cpu/f32_copy.h"
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
	// This OpenBLAS has no 16-bit GEMM: widen, multiply and accumulate in f32, and round the
	// result once, as a GPU GEMM with f32 compute does.
	const F32Copy fa(a, true), fb(b, true), fc(c, beta != 0.0f);
	// The transposes go to sgemm as flags: no operand is ever copied to transpose it.
	cblas_sgemm(CblasRowMajor, ta == Transpose::yes ? CblasTrans : CblasNoTrans,
		    tb == Transpose::yes ? CblasTrans : CblasNoTrans, static_cast<blasint>(d.m),
		    static_cast<blasint>(d.n), static_cast<blasint>(d.k), alpha, fa.data(),
		    static_cast<blasint>(a.dim(1)), fb.data(), static_cast<blasint>(b.dim(1)), beta, fc.data(),
		    static_cast<blasint>(c.dim(1)));
	fc.store();
}

} // namespace tower
