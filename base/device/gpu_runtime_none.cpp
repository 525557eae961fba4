// The GPU probe of a CPU-only build: no devices, nothing built.
#include "base/device/gpu_runtime.h"

#include "base/error.h"

namespace tower {

GpuRuntimeInfo probe_gpu_runtime()
{
	GpuRuntimeInfo info;
	info.why_none = "tower was built without CUDA (-Dcuda=disabled)";
	return info;
}

void select_gpu(int index)
{
	throw Error(fmt::format("cannot use CUDA device {}: tower was built without CUDA; rebuild with "
				"-Dcuda=enabled",
				index));
}

} // namespace tower
