// Check data for tower bench: small integers whose reductions are exact in any summation order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/reduce_op.h"
#include "base/tensor/dtype.h"
#include "base/tensor/element.h"

namespace tower::cli {

// Rank r's element i, an integer in [-3, 3].
double bench_value(int rank, size_t i);

// The reduction over `ranks` ranks of element i, in float64.
double bench_expected(int ranks, size_t i, ReduceOp op, DType dtype);

// Writes values[first + k] for k < count as `dtype` into host memory `out`.
void bench_fill(void* out, size_t count, DType dtype, int rank, size_t first);

double bench_tolerance(DType dtype, ReduceOp op);

// Elements of host memory `data` that differ from `want(first + k)` by more than `op` allows.
template <typename Want>
size_t bench_wrong(const void* data, size_t count, DType dtype, ReduceOp op, size_t first, Want want)
{
	size_t wrong = 0;
	for (size_t k = 0; k < count; ++k) {
		const double w = want(first + k), got = element_as_double(data, k, dtype);
		const double limit = bench_tolerance(dtype, op) * (w < 0 ? -w : w) + 1e-12;
		wrong += (got - w > limit || w - got > limit) ? 1 : 0;
	}
	return wrong;
}

} // namespace tower::cli
