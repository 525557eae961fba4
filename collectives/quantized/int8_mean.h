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

// Collective over the ranks of a communicator (duplicated here), with every rank on the same bits.
// Up to gather_ranks ranks, every rank gathers every rank's blocks (1.02 (N - 1) bytes a value
// received) and sums them in rank order: each rank's rounding error is bounded as above, the
// mean's by the mean of the ranks' bounds. From 3 ranks on that gather grows with N (past the f32
// ring's 8 (N - 1) / N bytes a value from 8 ranks on), so each rank owns a shard of whole blocks
// instead, receives every rank's blocks of it (an all-to-all), sums them in rank order, quantizes
// that mean again, and the ranks gather the shards: 2.04 (N - 1) / N bytes a value each way at any
// N, for a second rounding, by up to max|block of the mean| / 254 more.
class Int8Mean {
public:
	static constexpr int gather_ranks = 2;

	explicit Int8Mean(MPI_Comm comm);
	// In place: values[i] becomes the mean over the ranks of their quantized values[i].
	void run(float* values, int64_t count);
	int size() const { return size_; }

private:
	void gather_mean(float* values, int64_t count, int64_t blocks);
	void sharded_mean(float* values, int64_t count, int64_t blocks);

	CommHandle comm_;
	int size_ = 1;
	int rank_ = 0;
	std::vector<int8_t> mine_steps_, all_steps_, shard_steps_;
	std::vector<float> mine_scales_, all_scales_, shard_scales_, shard_mean_;
};

} // namespace tower
