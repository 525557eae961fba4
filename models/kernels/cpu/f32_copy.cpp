// An f32 view of a tensor for the CPU kernels: the tensor itself, or a widened copy of 16-bit data.
#include "models/kernels/cpu/f32_copy.h"

#include <algorithm>
#include <vector>

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

namespace {

// Where oneDNN has no kernels for a 16-bit type, every product widens its operands into copies,
// hundreds a step of up to 4 MiB each at the GPT's shapes. Allocated and freed each time, glibc
// gave the top of its heap back to the kernel and took it again (a few brk calls a step), and the
// pages were faulted in anew: an fp16 GPT step on a Zen 5 took 145-172 compute ms in some runs and
// 295-412 in others, with 2.1-3.4 s of system time a run against 0.5-0.6 (docs/cpu-compute.md,
// "16-bit types"). A thread keeps up to six buffers instead, the largest it has made (about 24 MiB
// at the GPT's shapes; they are never given back): after the first step every copy fits one.
constexpr size_t kept_buffers = 6;

std::vector<Tensor>& kept()
{
	thread_local std::vector<Tensor> buffers = [] {
		std::vector<Tensor> room;
		room.reserve(kept_buffers + 1); // so that keep_buffer, run by a destructor, never allocates
		return room;
	}();
	return buffers;
}

// The last kept buffer of at least `elements` floats, the likeliest still in cache, or a new one.
Tensor take_buffer(int64_t elements)
{
	std::vector<Tensor>& buffers = kept();
	for (auto it = buffers.rbegin(); it != buffers.rend(); ++it)
		if (it->numel() >= elements) {
			Tensor buffer = std::move(*it);
			buffers.erase(std::next(it).base());
			return buffer;
		}
	return Tensor::empty({elements}, DType::f32, Device{});
}

// Keeps `buffer` for a later copy, dropping the smallest where more than kept_buffers are kept.
void keep_buffer(Tensor buffer)
{
	std::vector<Tensor>& buffers = kept();
	buffers.push_back(std::move(buffer));
	if (buffers.size() > kept_buffers)
		buffers.erase(std::min_element(buffers.begin(), buffers.end(),
					       [](const Tensor& a, const Tensor& b) { return a.numel() < b.numel(); }));
}

} // namespace

F32Copy::F32Copy(const Tensor& t, bool load) : original_(t)
{
	if (t.dtype() == DType::f32) {
		f32_ = t;
		return;
	}
	buffer_ = take_buffer(std::max<int64_t>(t.numel(), 1));
	f32_ = Tensor::view(buffer_.data(), t.shape(), DType::f32, Device{});
	if (load)
		widen_to_f32(t, f32_.data_as<float>());
}

F32Copy::~F32Copy()
{
	if (buffer_.data() != nullptr)
		keep_buffer(std::move(buffer_));
}

void F32Copy::store() const
{
	if (original_.dtype() != DType::f32)
		narrow_from_f32(f32_.data_as<float>(), original_);
}

} // namespace tower
