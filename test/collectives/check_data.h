// Test data for the collective tests: small integers whose reductions are exact in every dtype.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "collectives/reduce_op.h"
#include "base/tensor/dtype.h"
#include "base/tensor/element.h"

namespace tower::test {

// Rank r's element i: an integer in [-6, 6], different across ranks and positions.
inline double value_of(int rank, size_t i)
{
	return static_cast<double>(static_cast<int64_t>((static_cast<size_t>(rank) * 5 + i * 3 + i / 7) % 13) - 6);
}

inline std::vector<char> encode(const std::vector<double>& values, DType dtype)
{
	std::vector<char> out(values.size() * dtype_size(dtype));
	for (size_t i = 0; i < values.size(); ++i)
		set_element(out.data(), i, dtype, values[i]);
	return out;
}

// The element at p, widened to double.
inline double decode(const char* p, DType dtype)
{
	return element_as_double(p, 0, dtype);
}

// The float64 reference of element i reduced over `ranks`.
inline double reference(const std::vector<int>& ranks, size_t i, ReduceOp op, DType dtype)
{
	double acc = value_of(ranks.front(), i);
	for (size_t k = 1; k < ranks.size(); ++k) {
		const double v = value_of(ranks[k], i);
		acc = op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v) : acc + v;
	}
	if (op != ReduceOp::mean)
		return acc;
	const double mean = acc / static_cast<double>(ranks.size());
	return dtype_is_float(dtype) ? mean : std::trunc(mean);
}

// Tolerance: exact except for means, which round once in the element type.
inline double tolerance(DType dtype, ReduceOp op)
{
	if (op != ReduceOp::mean)
		return 0;
	switch (dtype) {
	case DType::f16: return 4e-3;
	case DType::bf16: return 3e-2;
	case DType::f32: return 1e-6;
	default: return 1e-12;
	}
}

} // namespace tower::test
