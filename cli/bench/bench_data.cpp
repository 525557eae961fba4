// Check data for tower bench: small integers whose reductions are exact in any summation order.
#include "cli/bench/bench_data.h"

#include <algorithm>
#include <cmath>

#include "base/tensor/element.h"

namespace tower::cli {

double bench_value(int rank, size_t i)
{
	return static_cast<double>(static_cast<int64_t>((static_cast<size_t>(rank) * 3 + i) % 7) - 3);
}

double bench_expected(int ranks, size_t i, ReduceOp op, DType dtype)
{
	double acc = bench_value(0, i);
	for (int r = 1; r < ranks; ++r) {
		const double v = bench_value(r, i);
		acc = op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v) : acc + v;
	}
	if (op != ReduceOp::mean)
		return acc;
	return dtype_is_float(dtype) ? acc / ranks : std::trunc(acc / ranks);
}

void bench_fill(void* out, size_t count, DType dtype, int rank, size_t first)
{
	for (size_t k = 0; k < count; ++k)
		set_element(out, k, dtype, bench_value(rank, first + k));
}

double bench_tolerance(DType dtype, ReduceOp op)
{
	if (op != ReduceOp::mean)
		return 0;
	return dtype == DType::f16 ? 4e-3 : dtype == DType::bf16 ? 3e-2 : dtype == DType::f32 ? 1e-6 : 1e-12;
}

} // namespace tower::cli
