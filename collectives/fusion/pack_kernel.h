// The batched copy kernel behind copy_batch_device, kept apart so nvcc compiles no formatting code.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "collectives/fusion/pack.h"

namespace tower {

// The copies of one launch travel as the kernel's argument, which CUDA caps at 4 KiB: no device
// table to allocate, fill and free per call.
constexpr size_t copy_tasks_per_launch = 128;
struct CopyTaskTable {
	CopyTask tasks[copy_tasks_per_launch];
};
static_assert(sizeof(CopyTaskTable) <= 4000, "a kernel's arguments must stay under 4 KiB");

// Queues one kernel on `stream` that performs the first `count` (at most copy_tasks_per_launch)
// copies of `table`.
cudaError_t launch_copy_tasks(const CopyTaskTable& table, size_t count, cudaStream_t stream);

} // namespace tower
