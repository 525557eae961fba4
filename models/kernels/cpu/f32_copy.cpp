// An f32 view of a tensor for the CPU kernels: the tensor itself, or a widened copy of 16-bit data.
#include "models/kernels/cpu/f32_copy.h"

#include <algorithm>

#include "base/tensor/half.h"
#include "base/error.h"

namespace tower {

void widen_to_f32(const Tensor& src, float* out)
{
	widen_range(src, 0, src.numel(), out);
}

void narrow_from_f32(const float* in, const Tensor& dst)
{
	narrow_range(in, dst, 0, dst.numel());
}

void widen_range(const Tensor& src, int64_t start, int64_t count, float* out)
{
	const size_t n = static_cast<size_t>(count);
	switch (src.dtype()) {
	case DType::f32:
		std::copy_n(src.data_as<float>() + start, n, out);
		return;
	case DType::f16:
		widen_f16(src.data_as<uint16_t>() + start, out, n);
		return;
	case DType::bf16:
		widen_bf16(src.data_as<uint16_t>() + start, out, n);
		return;
	default:
		throw Error(fmt::format("cannot widen a {} tensor to f32; use f32, f16 or bf16",
					dtype_name(src.dtype())));
	}
}

void narrow_range(const float* in, const Tensor& dst, int64_t start, int64_t count)
{
	const size_t n = static_cast<size_t>(count);
	switch (dst.dtype()) {
	case DType::f32:
		std::copy_n(in, n, dst.data_as<float>() + start);
		return;
	case DType::f16:
		narrow_f16(in, dst.data_as<uint16_t>() + start, n);
		return;
	case DType::bf16:
		narrow_bf16(in, dst.data_as<uint16_t>() + start, n);
		return;
	default:
		throw Error(fmt::format("cannot round f32 to a {} tensor; use f32, f16 or bf16",
					dtype_name(dst.dtype())));
	}
}

F32Copy::F32Copy(const Tensor& t, bool load) : original_(t)
{
	if (t.dtype() == DType::f32) {
		f32_ = t;
		return;
	}
	f32_ = Tensor::empty(t.shape(), DType::f32, Device{});
	if (load)
		widen_to_f32(t, f32_.data_as<float>());
}

void F32Copy::store() const
{
	if (original_.dtype() != DType::f32)
		narrow_from_f32(f32_.data_as<float>(), original_);
}

} // namespace tower
