// An f32 view of a tensor for the CPU kernels: the tensor itself, or a widened copy of 16-bit data.
#pragma once

#include <algorithm>

#include "base/tensor/tensor.h"

namespace tower {

// Widens f32/f16/bf16 elements to f32, or rounds f32 to the destination's type.
void widen_to_f32(const Tensor& src, float* out);
void narrow_from_f32(const float* in, const Tensor& dst);
// The same for the `count` elements from element `start` on.
void widen_range(const Tensor& src, int64_t start, int64_t count, float* out);
void narrow_range(const float* in, const Tensor& dst, int64_t start, int64_t count);

// The CPU backend computes in f32 whatever the compute type: f16 and bf16 operands are widened
// into a temporary f32 tensor, and outputs are rounded back once, when store() is called. The
// temporary's memory is kept for the thread's next copies (f32_copy.cpp says why).
class F32Copy {
public:
	// `load` false skips reading the tensor (pure outputs).
	F32Copy(const Tensor& t, bool load);
	~F32Copy();
	F32Copy(const F32Copy&) = delete;
	F32Copy& operator=(const F32Copy&) = delete;

	// Valid while this object lives: a widened copy's memory goes back to the thread's kept buffers
	// when it is destroyed.
	float* data() const { return f32_.data_as<float>(); }
	// Rounds the f32 values back into the original tensor (nothing to do when it is f32).
	void store() const;

private:
	Tensor original_;
	Tensor f32_;    // the tensor itself, or a view of the first elements of buffer_
	Tensor buffer_; // the widened copy's memory, at least as large; empty for f32
};

// The same for a piece of a tensor, `count` elements from element `start` on, for kernels that walk
// a tensor a row or a chunk at a time: the tensor's own memory when it is f32, otherwise a widened
// copy in `scratch` (count floats the caller owns, on its stack or reused across pieces). A
// whole-tensor F32Copy of 16-bit data costs two passes over memory every call (and before its
// buffers were kept, an allocation and its page faults); a piece is widened, computed on and
// rounded back while it is in cache. The
// arithmetic and the one rounding on store() are the same as F32Copy's, so are the bits.
class F32Piece {
public:
	// Inline, and holding the tensor by reference, since it runs once per row: an f32 piece costs
	// a pointer addition. A temporary tensor would not outlive the piece, hence the deleted overload.
	F32Piece(const Tensor& t, int64_t start, int64_t count, float* scratch, bool load)
		: original_(t), start_(start), count_(count), data_(scratch)
	{
		if (t.dtype() == DType::f32)
			data_ = t.data_as<float>() + start;
		else if (load)
			widen_range(t, start, count, scratch);
	}
	F32Piece(Tensor&&, int64_t, int64_t, float*, bool) = delete;
	F32Piece(const F32Piece&) = delete;
	F32Piece& operator=(const F32Piece&) = delete;

	float* data() const { return data_; }
	void store() const
	{
		if (original_.dtype() != DType::f32)
			narrow_range(data_, original_, start_, count_);
	}

private:
	const Tensor& original_;
	int64_t start_;
	int64_t count_;
	float* data_;
};

// Pieces of at most this many elements suit stack buffers (8 KiB each).
constexpr int64_t f32_piece_elements = 2048;

// Calls body(start, count) over [0, n) in consecutive pieces of at most `piece` elements.
template <class Body>
void for_each_piece(int64_t n, int64_t piece, Body&& body)
{
	for (int64_t start = 0; start < n; start += piece)
		body(start, std::min(piece, n - start));
}


} // namespace tower
