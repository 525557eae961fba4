// A dense tensor on one device: shape, element type, and owned or borrowed memory.
#include "base/tensor/tensor.h"

#include "base/tensor/half.h"
#include "base/error.h"
#include "base/tensor/memory.h"

namespace tower {

int64_t shape_numel(const Shape& shape)
{
	int64_t n = 1;
	for (int64_t d : shape)
		n *= d;
	return n;
}

std::string shape_text(const Shape& shape)
{
	return fmt::format("[{}]", fmt::join(shape, ", "));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, const Device& device)
{
	for (int64_t d : shape)
		if (d < 0)
			throw Error(fmt::format("tensor shape {} has a negative dimension", shape_text(shape)));
	Tensor t;
	t.shape_ = shape;
	t.dtype_ = dtype;
	t.device_ = device;
	void* p = device_alloc(device, t.bytes());
	t.storage_ = std::shared_ptr<void>(p, [device](void* q) { device_free(device, q); });
	t.data_ = p;
	return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const Device& device)
{
	Tensor t = empty(shape, dtype, device);
	t.zero();
	return t;
}

Tensor Tensor::view(void* data, const Shape& shape, DType dtype, const Device& device)
{
	Tensor t;
	t.shape_ = shape;
	t.dtype_ = dtype;
	t.device_ = device;
	t.data_ = data;
	return t;
}

Tensor Tensor::from_host(const std::vector<float>& values, const Shape& shape, const Device& device)
{
	TOWER_CHECK_EQ(static_cast<int64_t>(values.size()), shape_numel(shape), "values for shape " + shape_text(shape));
	Tensor t = empty(shape, DType::f32, device);
	copy_bytes(t.data_, device, values.data(), Device{}, t.bytes());
	return t;
}

Tensor Tensor::reshaped(const Shape& shape) const
{
	TOWER_CHECK(shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_text(shape_), shape_text(shape));
	Tensor t = *this;
	t.shape_ = shape;
	return t;
}

Tensor Tensor::prefix(const Shape& shape) const
{
	TOWER_CHECK(shape_numel(shape) <= numel(), "a prefix {} does not fit in a tensor of {}", shape_text(shape),
		    shape_text(shape_));
	Tensor t = *this;
	t.shape_ = shape;
	return t;
}

Tensor Tensor::select(int64_t index) const
{
	TOWER_CHECK(rank() > 0 && index >= 0 && index < shape_[0], "entry {} of a tensor of {}", index, shape_text(shape_));
	Tensor t = *this;
	t.shape_.assign(shape_.begin() + 1, shape_.end());
	t.data_ = static_cast<char*>(data_) + static_cast<size_t>(index) * t.bytes();
	return t;
}

Tensor Tensor::slice(int64_t first, int64_t count) const
{
	TOWER_CHECK(rank() > 0 && first >= 0 && count >= 0 && first + count <= shape_[0], "entries [{}, {}) of a tensor of {}",
		    first, first + count, shape_text(shape_));
	Tensor t = *this;
	t.shape_[0] = count;
	const size_t entry_bytes = shape_[0] > 0 ? bytes() / static_cast<size_t>(shape_[0]) : 0;
	t.data_ = static_cast<char*>(data_) + static_cast<size_t>(first) * entry_bytes;
	return t;
}

Tensor Tensor::clone() const
{
	Tensor t = empty(shape_, dtype_, device_);
	t.copy_from(*this);
	return t;
}

void Tensor::copy_from(const Tensor& src)
{
	TOWER_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy of {} {} into {} {}",
		    dtype_name(src.dtype_), shape_text(src.shape_), dtype_name(dtype_), shape_text(shape_));
	copy_bytes(data_, device_, src.data_, src.device_, bytes());
}

void Tensor::zero()
{
	zero_bytes(data_, device_, bytes());
}

std::vector<float> Tensor::to_host_f32() const
{
	TOWER_CHECK(dtype_ == DType::f32 || dtype_ == DType::f16 || dtype_ == DType::bf16,
		    "to_host_f32 on a {} tensor; it reads f32, f16 and bf16", dtype_name(dtype_));
	const size_t n = static_cast<size_t>(numel());
	std::vector<float> out(n);
	if (dtype_ == DType::f32) {
		copy_bytes(out.data(), Device{}, data_, device_, bytes());
		return out;
	}
	std::vector<uint16_t> bits(n);
	copy_bytes(bits.data(), Device{}, data_, device_, bytes());
	if (dtype_ == DType::f16)
		widen_f16(bits.data(), out.data(), n);
	else
		widen_bf16(bits.data(), out.data(), n);
	return out;
}

} // namespace tower
