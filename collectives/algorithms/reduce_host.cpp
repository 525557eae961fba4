// Element-wise reductions of host buffers, the inner loops of the CPU collectives.
#include "collectives/algorithms/reduce_host.h"

#include <algorithm>
#include <array>

#include "base/tensor/half.h"
#include "base/error.h"

namespace tower {

namespace {

// The ops as functors so each loop below is one simple vectorizable body.
struct Add {
	template <typename T> T operator()(T a, T b) const { return a + b; }
};
struct Max {
	template <typename T> T operator()(T a, T b) const { return std::max(a, b); }
};
struct Min {
	template <typename T> T operator()(T a, T b) const { return std::min(a, b); }
};

template <typename T, typename Op>
void reduce_typed(T* out, const void* const* ins, size_t n, size_t count, Op op)
{
	// Two inputs at a time keeps each pass a plain streaming loop over contiguous memory.
	const T* a = static_cast<const T*>(ins[0]);
	if (n == 1) {
		if (out != a)
			std::copy(a, a + count, out);
		return;
	}
	const T* b = static_cast<const T*>(ins[1]);
	for (size_t i = 0; i < count; ++i)
		out[i] = op(a[i], b[i]);
	for (size_t k = 2; k < n; ++k) {
		const T* c = static_cast<const T*>(ins[k]);
		for (size_t i = 0; i < count; ++i)
			out[i] = op(out[i], c[i]);
	}
}

// 16-bit floats: widen a block of every input to f32, reduce there, narrow the result once.
template <typename Op>
void reduce_16(uint16_t* out, const void* const* ins, size_t n, size_t count, Op op, bool bf16)
{
	constexpr size_t block = 1024;
	std::array<float, block> acc{}, tmp{};
	for (size_t start = 0; start < count; start += block) {
		const size_t m = std::min(block, count - start);
		for (size_t k = 0; k < n; ++k) {
			const uint16_t* in = static_cast<const uint16_t*>(ins[k]) + start;
			float* dst = k == 0 ? acc.data() : tmp.data();
			bf16 ? widen_bf16(in, dst, m) : widen_f16(in, dst, m);
			if (k > 0)
				for (size_t i = 0; i < m; ++i)
					acc[i] = op(acc[i], tmp[i]);
		}
		bf16 ? narrow_bf16(acc.data(), out + start, m) : narrow_f16(acc.data(), out + start, m);
	}
}

template <typename Op>
void reduce_dispatch(void* out, const void* const* ins, size_t n, size_t count, DType dtype, Op op)
{
	switch (dtype) {
	case DType::f32: return reduce_typed(static_cast<float*>(out), ins, n, count, op);
	case DType::f64: return reduce_typed(static_cast<double*>(out), ins, n, count, op);
	case DType::i32: return reduce_typed(static_cast<int32_t*>(out), ins, n, count, op);
	case DType::i64: return reduce_typed(static_cast<int64_t*>(out), ins, n, count, op);
	case DType::f16: return reduce_16(static_cast<uint16_t*>(out), ins, n, count, op, false);
	case DType::bf16: return reduce_16(static_cast<uint16_t*>(out), ins, n, count, op, true);
	}
}

template <typename T> void divide_typed(T* data, size_t count, T divisor)
{
	for (size_t i = 0; i < count; ++i)
		data[i] /= divisor;
}

void divide_16(uint16_t* data, size_t count, float divisor, bool bf16)
{
	for (size_t i = 0; i < count; ++i)
		data[i] = bf16 ? f32_to_bf16(bf16_to_f32(data[i]) / divisor) : f32_to_f16(f16_to_f32(data[i]) / divisor);
}

} // namespace

void reduce_host(void* out, const void* const* ins, size_t n_inputs, size_t count, DType dtype, ReduceOp op)
{
	TOWER_CHECK(n_inputs > 0, "a reduction needs at least one input");
	if (count == 0)
		return;
	switch (op) {
	case ReduceOp::sum:
	case ReduceOp::mean: return reduce_dispatch(out, ins, n_inputs, count, dtype, Add{});
	case ReduceOp::max: return reduce_dispatch(out, ins, n_inputs, count, dtype, Max{});
	case ReduceOp::min: return reduce_dispatch(out, ins, n_inputs, count, dtype, Min{});
	}
}

void divide_host(void* data, size_t count, DType dtype, int64_t divisor)
{
	switch (dtype) {
	case DType::f32: return divide_typed(static_cast<float*>(data), count, static_cast<float>(divisor));
	case DType::f64: return divide_typed(static_cast<double*>(data), count, static_cast<double>(divisor));
	case DType::i32: return divide_typed(static_cast<int32_t*>(data), count, static_cast<int32_t>(divisor));
	case DType::i64: return divide_typed(static_cast<int64_t*>(data), count, divisor);
	case DType::f16: return divide_16(static_cast<uint16_t*>(data), count, static_cast<float>(divisor), false);
	case DType::bf16: return divide_16(static_cast<uint16_t*>(data), count, static_cast<float>(divisor), true);
	}
}

} // namespace tower
