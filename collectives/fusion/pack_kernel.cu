// The batched copy kernel behind copy_batch_device, kept apart so nvcc compiles no formatting code.
#include "collectives/fusion/pack_kernel.h"

#include <algorithm>

namespace tower {

namespace {

constexpr unsigned copy_threads = 256;
// Bytes one block moves per pass of its loop; a copy gets about one block per this many bytes.
constexpr size_t bytes_per_block = 16 * copy_threads * 8;
// Enough blocks in all to fill a large GPU's multiprocessors several times over.
constexpr size_t max_blocks_per_launch = 2048;

// Copy blockIdx.y is spread over the gridDim.x blocks of its row, whose threads stride over it 16
// bytes at a time where alignment allows. (One block per copy left all but a handful of a GPU's
// multiprocessors idle: 38 GB/s against cudaMemcpy's 1 TB/s on an H100 for the MLP's bucket.)
__global__ void copy_tasks(const CopyTaskTable table)
{
	const CopyTask task = table.tasks[blockIdx.y];
	char* dst = static_cast<char*>(task.dst);
	const char* src = static_cast<const char*>(task.src);
	const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
	const size_t stride = size_t(gridDim.x) * blockDim.x;
	const bool wide = ((reinterpret_cast<size_t>(dst) | reinterpret_cast<size_t>(src)) % 16) == 0;
	size_t done = 0;
	if (wide) {
		const size_t vectors = task.bytes / 16;
		for (size_t i = first; i < vectors; i += stride)
			reinterpret_cast<int4*>(dst)[i] = reinterpret_cast<const int4*>(src)[i];
		done = vectors * 16;
	}
	for (size_t i = done + first; i < task.bytes; i += stride)
		dst[i] = src[i];
}

} // namespace

cudaError_t launch_copy_tasks(const CopyTaskTable& table, size_t count, cudaStream_t stream)
{
	if (count == 0)
		return cudaSuccess;
	size_t largest = 0;
	for (size_t i = 0; i < count; ++i)
		largest = std::max(largest, table.tasks[i].bytes);
	// Every copy gets as many blocks as the largest needs (the smaller ones' extra blocks return
	// at once), within the launch's budget.
	const size_t wanted = (largest + bytes_per_block - 1) / bytes_per_block;
	const size_t per_task = std::clamp<size_t>(wanted, 1, std::max<size_t>(1, max_blocks_per_launch / count));
	const dim3 grid(static_cast<unsigned>(per_task), static_cast<unsigned>(count));
	copy_tasks<<<grid, copy_threads, 0, stream>>>(table);
	return cudaGetLastError();
}

} // namespace tower
