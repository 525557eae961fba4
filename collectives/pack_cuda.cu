// The GPU half of copy_batch: all of a bucket's copies in one kernel launch.
#include "collectives/pack.h"

#include <cuda_runtime.h>

#include "runtime/cuda_check.h"
#include "runtime/gpu_runtime.h"

namespace tower {

namespace {

// One block per task; its threads stride over the bytes, 16 at a time where alignment allows.
__global__ void copy_tasks(const CopyTask* tasks)
{
	const CopyTask task = tasks[blockIdx.x];
	char* dst = static_cast<char*>(task.dst);
	const char* src = static_cast<const char*>(task.src);
	const bool wide = ((reinterpret_cast<size_t>(dst) | reinterpret_cast<size_t>(src)) % 16) == 0;
	size_t done = 0;
	if (wide) {
		const size_t vectors = task.bytes / 16;
		for (size_t i = threadIdx.x; i < vectors; i += blockDim.x)
			reinterpret_cast<int4*>(dst)[i] = reinterpret_cast<const int4*>(src)[i];
		done = vectors * 16;
	}
	for (size_t i = done + threadIdx.x; i < task.bytes; i += blockDim.x)
		dst[i] = src[i];
}

} // namespace

void copy_batch_device(const std::vector<CopyTask>& tasks, const Device& device)
{
	if (tasks.empty())
		return;
	select_gpu(device.index);
	CopyTask* table = nullptr;
	const size_t bytes = tasks.size() * sizeof(CopyTask);
	TOWER_CUDA(cudaMalloc(&table, bytes));
	try {
		TOWER_CUDA(cudaMemcpy(table, tasks.data(), bytes, cudaMemcpyHostToDevice));
		copy_tasks<<<static_cast<unsigned>(tasks.size()), 256>>>(table);
		TOWER_CUDA(cudaGetLastError());
		TOWER_CUDA(cudaDeviceSynchronize());
	} catch (...) {
		cudaFree(table);
		throw;
	}
	TOWER_CUDA(cudaFree(table));
}

} // namespace tower
