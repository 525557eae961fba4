// The GPU half of copy_batch: a bucket's copies in one kernel launch per 128 of them.
#include "collectives/fusion/pack.h"

#include <algorithm>

#include "collectives/fusion/pack_kernel.h"
#include "base/device/cuda_check.h"
#include "base/device/gpu_runtime.h"
#include "base/device/thread_stream.h"

namespace tower {

void copy_batch_device(const std::vector<CopyTask>& tasks, const Device& device)
{
	if (tasks.empty())
		return;
	select_gpu(device.index);
	const auto stream = static_cast<cudaStream_t>(thread_stream());
	CopyTaskTable table;
	for (size_t first = 0; first < tasks.size(); first += copy_tasks_per_launch) {
		const size_t count = std::min(copy_tasks_per_launch, tasks.size() - first);
		std::copy_n(tasks.begin() + static_cast<std::ptrdiff_t>(first), count, table.tasks);
		TOWER_CUDA(launch_copy_tasks(table, count, stream));
	}
}

} // namespace tower
