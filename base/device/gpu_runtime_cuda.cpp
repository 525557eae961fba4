// The GPU probe of a CUDA build: devices and CUDA, cuBLAS and NCCL versions.
#include "base/device/gpu_runtime.h"

#include <cstdio>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "base/error.h"

namespace tower {

namespace {

std::string cuda_version_text(int v)
{
	return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

// "PCI 0000:41:00.0, GPU-6f3c...": the bus id and the UUID in nvidia-smi's spelling.
std::string physical_id(int device, const cudaDeviceProp& prop)
{
	char bus[32] = {};
	if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess)
		std::snprintf(bus, sizeof bus, "unknown");
	std::string uuid = "GPU-";
	const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
	for (int i = 0; i < 16; ++i) {
		uuid += fmt::format("{:02x}", b[i]);
		if (i == 3 || i == 5 || i == 7 || i == 9)
			uuid += '-';
	}
	return fmt::format("PCI {}, {}", bus, uuid);
}

} // namespace

GpuRuntimeInfo probe_gpu_runtime()
{
	GpuRuntimeInfo info;
	info.built = true;
	int v = 0;
	cudaRuntimeGetVersion(&v);
	info.cuda_runtime = cuda_version_text(v);
	v = 0;
	info.cuda_driver = cudaDriverGetVersion(&v) == cudaSuccess && v > 0 ? cuda_version_text(v) : "no driver";
	info.cublas = fmt::format("{}.{}.{}", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
	v = 0;
	ncclGetVersion(&v);
	info.nccl = fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);

	int count = 0;
	const cudaError_t rc = cudaGetDeviceCount(&count);
	if (rc != cudaSuccess) {
		info.why_none = cudaGetErrorString(rc);
		cudaGetLastError(); // clear the sticky-free error so later calls start clean
		return info;
	}
	info.device_count = count;
	if (count == 0)
		info.why_none = "no CUDA device is visible";
	for (int d = 0; d < count; ++d) {
		cudaDeviceProp prop{};
		if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
			info.device_names.emplace_back(prop.name);
			info.device_ids.push_back(physical_id(d, prop));
		} else {
			info.device_names.emplace_back("unknown");
			info.device_ids.push_back(fmt::format("visible device {} (properties unreadable)", d));
		}
	}
	return info;
}

void select_gpu(int index)
{
	const cudaError_t rc = cudaSetDevice(index);
	if (rc != cudaSuccess)
		throw Error(fmt::format("cudaSetDevice({}) failed: {}", index, cudaGetErrorString(rc)));
}

} // namespace tower
