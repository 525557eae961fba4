// The CUDA backend's entry point in a build without CUDA: asking for it is an error.
#include "models/kernels/ops.h"
#include "base/error.h"

namespace tower {

const Ops& cuda_ops(int device_index)
{
	throw Error(fmt::format("tensor ops on cuda:{} need a CUDA build of tower; this one is CPU-only "
				"(rebuild with -Dcuda=enabled, or run on the CPU with TOWER_DEVICE=cpu)",
				device_index));
}

} // namespace tower
