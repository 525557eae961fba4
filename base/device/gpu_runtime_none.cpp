// The GPU probe of a CPU-only build: no devices, nothing built, and the error for a GPU device.
#include "base/device/gpu_runtime.h"

#include "base/device/cpu_only.h"
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

void require_cpu_build(const Device& device)
{
	if (device.is_cuda())
		throw Error(fmt::format("device {} used, but tower was built without CUDA; rebuild with "
					"-Dcuda=enabled",
					device.name()));
}

} // namespace tower
