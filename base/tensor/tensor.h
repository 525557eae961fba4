// A dense tensor on one device: shape, element type, and owned or borrowed memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/device/device.h"
#include "base/tensor/dtype.h"

namespace tower {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_text(const Shape& shape); // "[784, 1024]"

// Copies share memory (like a handle); clone() makes a deep copy. A tensor either owns its
// memory (created by empty/zeros/from_host) or borrows it (view), for example a gradient that
// lives inside a fused communication bucket.
class Tensor {
public:
	Tensor() = default;

	static Tensor empty(const Shape& shape, DType dtype, const Device& device);
	static Tensor zeros(const Shape& shape, DType dtype, const Device& device);
	// Borrows `data`, which must stay valid and hold shape_numel(shape) elements of `dtype`.
	static Tensor view(void* data, const Shape& shape, DType dtype, const Device& device);
	// An f32 tensor on `device` holding `values` (whose size must match the shape).
	static Tensor from_host(const std::vector<float>& values, const Shape& shape, const Device& device);

	bool defined() const { return data_ != nullptr || numel() == 0; }
	void* data() const { return data_; }
	template <typename T> T* data_as() const { return static_cast<T*>(data_); }
	const Shape& shape() const { return shape_; }
	int64_t dim(size_t i) const { return shape_.at(i); }
	size_t rank() const { return shape_.size(); }
	int64_t numel() const { return shape_numel(shape_); }
	size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
	DType dtype() const { return dtype_; }
	const Device& device() const { return device_; }

	// Same memory, another shape of the same element count.
	Tensor reshaped(const Shape& shape) const;
	// The first shape_numel(shape) elements viewed as `shape`; shares (and keeps alive) the memory.
	Tensor prefix(const Shape& shape) const;
	// Entry `index` along the first dimension, as a tensor of the remaining dimensions that
	// shares (and keeps alive) the memory.
	Tensor select(int64_t index) const;
	// Entries [first, first + count) along the first dimension, sharing (and keeping alive) the memory.
	Tensor slice(int64_t first, int64_t count) const;
	Tensor clone() const;
	// Copies `src` into this tensor; shapes and dtypes must match, devices may differ.
	void copy_from(const Tensor& src);
	void zero();
	// The elements as f32 on the host (f32, f16 and bf16 tensors; 16-bit values widen exactly).
	std::vector<float> to_host_f32() const;

private:
	std::shared_ptr<void> storage_;
	void* data_ = nullptr;
	Shape shape_;
	DType dtype_ = DType::f32;
	Device device_;
};

} // namespace tower
