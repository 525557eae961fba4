// The CPU backend's setup and the choice of backend by device.
#include "models/cpu/cpu_ops.h"

#include <cstdlib>

#include <cblas.h>

namespace tower {

CpuOps::CpuOps()
{
	if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr)
		openblas_set_num_threads(1);
}

const Ops& cpu_ops()
{
	static const CpuOps ops;
	return ops;
}

const Ops& ops_for(const Device& device)
{
	return device.is_cuda() ? cuda_ops(device.index) : cpu_ops();
}

} // namespace tower
