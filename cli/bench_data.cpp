// Check data for tower bench: small integers whose reductions are exact in any summation order.
#include "cli/bench_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collectives/half.h"

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
	char* p = static_cast<char*>(out);
	for (size_t k = 0; k < count; ++k, p += dtype_size(dtype)) {
		const double v = bench_value(rank, first + k);
		switch (dtype) {
		case DType::f32: { const float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
		case DType::f64: std::memcpy(p, &v, 8); break;
		case DType::f16: { const uint16_t x = f32_to_f16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
		case DType::bf16: { const uint16_t x = f32_to_bf16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
		case DType::i32: { const int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
		case DType::i64: { const int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
		}
	}
}

double bench_read(const void* data, size_t k, DType dtype)
{
	const char* p = static_cast<const char*>(data) + k * dtype_size(dtype);
	switch (dtype) {
	case DType::f32: { float x; std::memcpy(&x, p, 4); return x; }
	case DType::f64: { double x; std::memcpy(&x, p, 8); return x; }
	case DType::f16: { uint16_t x; std::memcpy(&x, p, 2); return f16_to_f32(x); }
	case DType::bf16: { uint16_t x; std::memcpy(&x, p, 2); return bf16_to_f32(x); }
	case DType::i32: { int32_t x; std::memcpy(&x, p, 4); return x; }
	case DType::i64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
	}
	return 0;
}

double bench_tolerance(DType dtype, ReduceOp op)
{
	if (op != ReduceOp::mean)
		return 0;
	return dtype == DType::f16 ? 4e-3 : dtype == DType::bf16 ? 3e-2 : dtype == DType::f32 ? 1e-6 : 1e-12;
}

} // namespace tower::cli
