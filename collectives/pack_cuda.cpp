// The GPU half of copy_batch: all of a bucket's copies in one kernel launch.
#include "collectives/pack.h"

#include "collectives/pack_kernel.h"
#include "base/device/cuda_check.h"
#include "base/device/gpu_runtime.h"

namespace tower {

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
		TOWER_CUDA(launch_copy_tasks(table, tasks.size()));
		TOWER_CUDA(cudaDeviceSynchronize());
	} catch (...) {
		cudaFree(table);
		throw;
	}
	TOWER_CUDA(cudaFree(table));
}

} // namespace tower
