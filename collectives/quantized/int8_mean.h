// The mean over ranks of f32 values sent as int8 blocks: each block of 256 values travels as one
// f32 scale and 256 int8 steps of it, a quarter of the bytes (for local-sgd's outer all-reduce).
#pragma once

#include <cstdint>
#include <vector>

#include <mpi.h>

#include "base/mpi/topology.h"

namespace tower {

inline constexpr int64_t int8_block_values = 256;

// A block's scale is its largest magnitude / 127 and each value is rounded to the nearest step,
// so a value is off by at most scale / 2 = max|block| / 254. A block holding an inf or NaN gets a
// NaN scale: it dequantizes to NaN, so non-finite input stays non-finite.
void quantize_int8_blocks(const float* values, int64_t count, int8_t* steps, float* scales);
// out[i] += steps[i] * scale of i's block.
void add_dequantized_int8_blocks(const int8_t* steps, const float* scales, int64_t count, float* out);
// The blocks and bytes `count` values take.
int64_t int8_blocks_of(int64_t count);
int64_t int8_bytes_of(int64_t count);

// Collective over the ranks of a communicator (duplicated here): every rank gathers every rank's
// blocks and sums them in rank order, so every rank ends with the same bits. Each rank's
// rounding error is bounded as above; the mean's by the mean of the ranks' bounds.
class Int8Mean {
public:
	explicit Int8Mean(MPI_Comm comm);
	// In place: values[i] becomes the mean over the ranks of their quantized values[i].
	void run(float* values, int64_t count);
	int size() const { return size_; }

private:
	CommHandle comm_;
	int size_ = 1;
	std::vector<int8_t> mine_steps_, all_steps_;
	std::vector<float> mine_scales_, all_scales_;
};

} // namespace tower
