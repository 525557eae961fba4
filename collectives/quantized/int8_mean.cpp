// The mean over ranks of f32 values sent as int8 blocks: each block of 256 values travels as one
// f32 scale and 256 int8 steps of it, a quarter of the bytes (for local-sgd's outer all-reduce).
#include "collectives/quantized/int8_mean.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

int64_t int8_blocks_of(int64_t count)
{
	return (count + int8_block_values - 1) / int8_block_values;
}

int64_t int8_bytes_of(int64_t count)
{
	return count + int8_blocks_of(count) * static_cast<int64_t>(sizeof(float));
}

void quantize_int8_blocks(const float* values, int64_t count, int8_t* steps, float* scales)
{
	for (int64_t b = 0; b < int8_blocks_of(count); ++b) {
		const int64_t first = b * int8_block_values, end = std::min(count, first + int8_block_values);
		float largest = 0;
		bool finite = true;
		for (int64_t i = first; i < end; ++i) {
			finite = finite && std::isfinite(values[i]);
			largest = std::max(largest, std::fabs(values[i]));
		}
		const float scale = finite ? largest / 127.0f : std::numeric_limits<float>::quiet_NaN();
		scales[b] = scale;
		for (int64_t i = first; i < end; ++i) {
			const float q = finite && scale > 0 ? std::nearbyint(values[i] / scale) : 0.0f;
			steps[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
		}
	}
}

void add_dequantized_int8_blocks(const int8_t* steps, const float* scales, int64_t count, float* out)
{
	for (int64_t b = 0; b < int8_blocks_of(count); ++b) {
		const int64_t first = b * int8_block_values, end = std::min(count, first + int8_block_values);
		const float scale = scales[b];
		for (int64_t i = first; i < end; ++i)
			out[i] += static_cast<float>(steps[i]) * scale;
	}
}

namespace {

// The values and blocks a rank owns in the sharded mean: whole blocks, as even as they allow.
struct Shard {
	int64_t first_block, end_block, first, end;
	int64_t blocks() const { return end_block - first_block; }
	int64_t values() const { return end - first; }
};

Shard shard_of(int rank, int ranks, int64_t count, int64_t blocks)
{
	const int64_t first_block = blocks * rank / ranks, end_block = blocks * (rank + 1) / ranks;
	return {first_block, end_block, std::min(count, first_block * int8_block_values),
		std::min(count, end_block * int8_block_values)};
}

} // namespace

Int8Mean::Int8Mean(MPI_Comm comm) : comm_(duplicate_comm(comm))
{
	TOWER_MPI(MPI_Comm_size(comm_.get(), &size_));
	TOWER_MPI(MPI_Comm_rank(comm_.get(), &rank_));
}

void Int8Mean::run(float* values, int64_t count)
{
	TOWER_CHECK(count <= std::numeric_limits<int>::max(), "an int8 exchange of {} values: at most {} at a time", count,
		    std::numeric_limits<int>::max());
	const int64_t blocks = int8_blocks_of(count);
	mine_steps_.resize(static_cast<size_t>(count));
	mine_scales_.resize(static_cast<size_t>(blocks));
	quantize_int8_blocks(values, count, mine_steps_.data(), mine_scales_.data());
	if (size_ <= gather_ranks)
		gather_mean(values, count, blocks);
	else
		sharded_mean(values, count, blocks);
}

void Int8Mean::gather_mean(float* values, int64_t count, int64_t blocks)
{
	all_steps_.resize(static_cast<size_t>(count * size_));
	all_scales_.resize(static_cast<size_t>(blocks * size_));
	MPI_Request requests[2];
	TOWER_MPI(MPI_Iallgather(mine_steps_.data(), static_cast<int>(count), MPI_INT8_T, all_steps_.data(),
				 static_cast<int>(count), MPI_INT8_T, comm_.get(), &requests[0]));
	TOWER_MPI(MPI_Iallgather(mine_scales_.data(), static_cast<int>(blocks), MPI_FLOAT, all_scales_.data(),
				 static_cast<int>(blocks), MPI_FLOAT, comm_.get(), &requests[1]));
	wait_request(requests[0], {"int8 all-gather", comm_.get()});
	wait_request(requests[1], {"int8 all-gather", comm_.get()});
	// Summed in rank order from zero: the same bits on every rank.
	std::fill_n(values, count, 0.0f);
	for (int r = 0; r < size_; ++r)
		add_dequantized_int8_blocks(all_steps_.data() + r * count, all_scales_.data() + r * blocks, count, values);
	const float inverse = 1.0f / static_cast<float>(size_);
	for (int64_t i = 0; i < count; ++i)
		values[i] *= inverse;
}

void Int8Mean::sharded_mean(float* values, int64_t count, int64_t blocks)
{
	// Where each rank's shard lies, in values and in blocks (MPI counts: count fits an int).
	const size_t n = static_cast<size_t>(size_);
	std::vector<int> value_counts(n), value_starts(n), block_counts(n), block_starts(n);
	for (int r = 0; r < size_; ++r) {
		const Shard s = shard_of(r, size_, count, blocks);
		value_counts[r] = static_cast<int>(s.values()), value_starts[r] = static_cast<int>(s.first);
		block_counts[r] = static_cast<int>(s.blocks()), block_starts[r] = static_cast<int>(s.first_block);
	}
	const Shard own = shard_of(rank_, size_, count, blocks);
	const int own_values = static_cast<int>(own.values()), own_blocks = static_cast<int>(own.blocks());
	// Every rank's blocks of this shard, side by side, are addressed by ints too.
	TOWER_CHECK(own.values() * size_ <= std::numeric_limits<int>::max(),
		    "an int8 exchange of {} values over {} ranks: a shard's values from every rank pass an MPI count ({}); "
		    "send fewer values at a time", count, size_, std::numeric_limits<int>::max());
	// Every rank's blocks of this rank's shard, rank after rank.
	shard_steps_.resize(n * static_cast<size_t>(own_values));
	shard_scales_.resize(n * static_cast<size_t>(own_blocks));
	std::vector<int> from_values(n, own_values), from_value_starts(n), from_blocks(n, own_blocks), from_block_starts(n);
	for (int r = 0; r < size_; ++r)
		from_value_starts[r] = r * own_values, from_block_starts[r] = r * own_blocks;
	MPI_Request requests[2];
	TOWER_MPI(MPI_Ialltoallv(mine_steps_.data(), value_counts.data(), value_starts.data(), MPI_INT8_T,
				 shard_steps_.data(), from_values.data(), from_value_starts.data(), MPI_INT8_T, comm_.get(),
				 &requests[0]));
	TOWER_MPI(MPI_Ialltoallv(mine_scales_.data(), block_counts.data(), block_starts.data(), MPI_FLOAT,
				 shard_scales_.data(), from_blocks.data(), from_block_starts.data(), MPI_FLOAT, comm_.get(),
				 &requests[1]));
	wait_request(requests[0], {"int8 all-to-all", comm_.get()});
	wait_request(requests[1], {"int8 all-to-all", comm_.get()});
	// The shard's mean, summed in rank order from zero, and quantized again: the shard starts on a
	// block boundary, so its blocks are the whole vector's.
	shard_mean_.assign(static_cast<size_t>(own_values), 0.0f);
	for (int r = 0; r < size_; ++r)
		add_dequantized_int8_blocks(shard_steps_.data() + r * own_values, shard_scales_.data() + r * own_blocks,
					    own_values, shard_mean_.data());
	const float inverse = 1.0f / static_cast<float>(size_);
	for (float& v : shard_mean_)
		v *= inverse;
	quantize_int8_blocks(shard_mean_.data(), own_values, mine_steps_.data() + own.first,
			     mine_scales_.data() + own.first_block);
	// Every shard's mean to every rank, in place: shard r lands where its values lie.
	all_steps_.resize(static_cast<size_t>(count));
	all_scales_.resize(static_cast<size_t>(blocks));
	TOWER_MPI(MPI_Iallgatherv(mine_steps_.data() + own.first, own_values, MPI_INT8_T, all_steps_.data(),
				  value_counts.data(), value_starts.data(), MPI_INT8_T, comm_.get(), &requests[0]));
	TOWER_MPI(MPI_Iallgatherv(mine_scales_.data() + own.first_block, own_blocks, MPI_FLOAT, all_scales_.data(),
				  block_counts.data(), block_starts.data(), MPI_FLOAT, comm_.get(), &requests[1]));
	wait_request(requests[0], {"int8 all-gather", comm_.get()});
	wait_request(requests[1], {"int8 all-gather", comm_.get()});
	std::fill_n(values, count, 0.0f);
	add_dequantized_int8_blocks(all_steps_.data(), all_scales_.data(), count, values);
}

} // namespace tower
