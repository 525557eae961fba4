// An f32 view of a tensor for the CPU kernels: the tensor itself, or a widened copy of 16-bit data.
#pragma once

#include "base/tensor/tensor.h"

namespace tower {

// The CPU backend computes in f32 whatever the compute type: f16 and bf16 operands are widened
// into a temporary f32 tensor, and outputs are rounded back once, when store() is called.
class F32Copy {
public:
	// `load` false skips reading the tensor (pure outputs).
	F32Copy(const Tensor& t, bool load);
	F32Copy(const F32Copy&) = delete;
	F32Copy& operator=(const F32Copy&) = delete;

	float* data() const { return f32_.data_as<float>(); }
	const Tensor& f32() const { return f32_; }
	// Rounds the f32 values back into the original tensor (nothing to do when it is f32).
	void store() const;

private:
	Tensor original_;
	Tensor f32_;
};

// Widens f32/f16/bf16 elements to f32, or rounds f32 to the destination's type.
void widen_to_f32(const Tensor& src, float* out);
void narrow_from_f32(const float* in, const Tensor& dst);
// The same for the `count` elements from element `start` on.
void widen_range(const Tensor& src, int64_t start, int64_t count, float* out);
void narrow_range(const float* in, const Tensor& dst, int64_t start, int64_t count);

} // namespace tower
