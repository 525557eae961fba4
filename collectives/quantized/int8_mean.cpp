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

Int8Mean::Int8Mean(MPI_Comm comm) : comm_(duplicate_comm(comm))
{
	TOWER_MPI(MPI_Comm_size(comm_.get(), &size_));
}

void Int8Mean::run(float* values, int64_t count)
{
	TOWER_CHECK(count <= std::numeric_limits<int>::max(), "an int8 exchange of {} values: at most {} at a time", count,
		    std::numeric_limits<int>::max());
	const int64_t blocks = int8_blocks_of(count);
	mine_steps_.resize(static_cast<size_t>(count));
	mine_scales_.resize(static_cast<size_t>(blocks));
	all_steps_.resize(static_cast<size_t>(count * size_));
	all_scales_.resize(static_cast<size_t>(blocks * size_));
	quantize_int8_blocks(values, count, mine_steps_.data(), mine_scales_.data());
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

} // namespace tower
