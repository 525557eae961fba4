// Device memory of a CPU-only build: only the CPU device exists; a CUDA device throws.
#include <cstring>

#include "base/device/cpu_only.h"
#include "base/error.h"
#include "base/tensor/memory.h"
#include "base/tensor/memory_host.h"

namespace tower {

void* device_alloc(const Device& device, size_t bytes)
{
	require_cpu_build(device);
	return host_alloc(bytes);
}

void device_free(const Device&, void* pointer) noexcept
{
	host_free(pointer);
}

void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device, size_t bytes)
{
	require_cpu_build(dst_device);
	require_cpu_build(src_device);
	if (bytes)
		std::memcpy(dst, src, bytes);
}

void upload_bytes_async(void* dst, const Device& dst_device, const void* src, size_t bytes)
{
	copy_bytes(dst, dst_device, src, Device{}, bytes);
}

void* pinned_host_alloc(const Device& device, size_t bytes)
{
	require_cpu_build(device);
	return bytes ? host_alloc(bytes) : nullptr;
}

void pinned_host_free(const Device&, void* pointer) noexcept
{
	host_free(pointer);
}

void zero_bytes(void* pointer, const Device& device, size_t bytes)
{
	require_cpu_build(device);
	if (bytes)
		std::memset(pointer, 0, bytes);
}

size_t peak_memory_bytes(const Device& device)
{
	require_cpu_build(device);
	return host_peak_rss_bytes();
}

void device_synchronize(const Device& device)
{
	require_cpu_build(device);
}

void wait_thread_stream(const Device& device)
{
	require_cpu_build(device);
}

} // namespace tower
