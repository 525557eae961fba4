// The CUDA device of this rank, for GPU tests (which run only when every rank sees a GPU).
#pragma once

#include "base/device/device.h"
#include "test/harness/mpi_main.h"

namespace tower::test {

inline Device gpu()
{
	const Topology t(world().comm(), std::nullopt);
	return assign_device(t, probe_gpu_runtime(), DevicePreference::cuda);
}

} // namespace tower::test
