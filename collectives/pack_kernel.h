// The batched copy kernel behind copy_batch_device, kept apart so nvcc compiles no formatting code.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "collectives/pack.h"

namespace tower {

// Launches one kernel that performs `count` copies described by `device_table` (in device memory).
cudaError_t launch_copy_tasks(const CopyTask* device_table, size_t count);

} // namespace tower
