// Device memory of a CUDA build: host memory for the CPU, cudaMalloc and cudaMemcpy for GPUs.
#include <cstring>

#include "base/device/cuda_check.h"
#include "base/device/gpu_runtime.h"
#include "base/device/stream.h"
#include "base/tensor/memory.h"
#include "base/tensor/memory_host.h"
#include "base/tensor/memory_ledger.h"

namespace tower {

namespace {

// One ledger per GPU index; a rank uses one or two.
constexpr int max_gpus = 64;

MemoryLedger& ledger(const Device& device)
{
	static MemoryLedger ledgers[max_gpus];
	return ledgers[static_cast<size_t>(device.index) % max_gpus];
}

// Everything in use on the current GPU now (CUDA's context, cuBLAS's and NCCL's buffers
// included); 0 when it cannot be asked.
size_t device_in_use()
{
	size_t free = 0, total = 0;
	return cudaMemGetInfo(&free, &total) == cudaSuccess ? total - free : 0;
}

} // namespace

void* device_alloc(const Device& device, size_t bytes)
{
	if (!device.is_cuda())
		return host_alloc(bytes);
	if (bytes == 0)
		return nullptr;
	// CUDA's current device is per host thread; the caller's thread may never have chosen one.
	select_gpu(device.index);
	void* p = nullptr;
	const cudaError_t rc = cudaMalloc(&p, bytes);
	if (rc != cudaSuccess)
		throw Error(fmt::format("cudaMalloc of {} bytes on {} failed: {}", bytes, device.name(),
					cudaGetErrorString(rc)));
	// The device's use right after each of tower's allocations is a sample of its high-water mark
	// (an allocation is when it grows); the ledger keeps the largest.
	ledger(device).allocated(p, bytes);
	ledger(device).observe(device_in_use());
	return p;
}

void device_free(const Device& device, void* pointer) noexcept
{
	if (!device.is_cuda())
		host_free(pointer);
	else if (pointer) {
		cudaSetDevice(device.index);
		cudaFree(pointer);
		ledger(device).freed(pointer);
	}
}

void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device, size_t bytes)
{
	if (bytes == 0)
		return;
	if (!dst_device.is_cuda() && !src_device.is_cuda()) {
		std::memcpy(dst, src, bytes);
		return;
	}
	select_gpu(dst_device.is_cuda() ? dst_device.index : src_device.index);
	// cudaMemcpyDefault infers the direction from unified addressing. A plain cudaMemcpy may return
	// before a device-to-device or pageable host-to-device copy is done; the promise is that the
	// copy is complete, so wait for this thread's stream (and only it: a collective in flight on
	// the communication stream is not this copy's business).
	const auto stream = static_cast<cudaStream_t>(thread_stream());
	TOWER_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
	TOWER_CUDA(cudaStreamSynchronize(stream));
}

void upload_bytes_async(void* dst, const Device& dst_device, const void* src, size_t bytes)
{
	if (!dst_device.is_cuda()) {
		copy_bytes(dst, dst_device, src, Device{}, bytes);
		return;
	}
	if (bytes == 0)
		return;
	select_gpu(dst_device.index);
	TOWER_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(thread_stream())));
}

void* pinned_host_alloc(const Device& device, size_t bytes)
{
	if (!device.is_cuda())
		return bytes ? host_alloc(bytes) : nullptr;
	if (bytes == 0)
		return nullptr;
	select_gpu(device.index);
	void* p = nullptr;
	const cudaError_t rc = cudaMallocHost(&p, bytes);
	if (rc != cudaSuccess)
		throw Error(fmt::format("cudaMallocHost of {} bytes of pinned host memory for {} failed: {}", bytes,
					device.name(), cudaGetErrorString(rc)));
	return p;
}

void pinned_host_free(const Device& device, void* pointer) noexcept
{
	if (!device.is_cuda())
		host_free(pointer);
	else if (pointer)
		cudaFreeHost(pointer);
}

void zero_bytes(void* pointer, const Device& device, size_t bytes)
{
	if (bytes == 0)
		return;
	if (!device.is_cuda()) {
		std::memset(pointer, 0, bytes);
	} else {
		select_gpu(device.index);
		TOWER_CUDA(cudaMemsetAsync(pointer, 0, bytes, static_cast<cudaStream_t>(thread_stream())));
	}
}

size_t peak_memory_bytes(const Device& device)
{
	if (!device.is_cuda())
		return host_peak_rss_bytes();
	select_gpu(device.index);
	ledger(device).observe(device_in_use());
	return ledger(device).peak();
}

void device_synchronize(const Device& device)
{
	if (device.is_cuda()) {
		select_gpu(device.index);
		TOWER_CUDA(cudaDeviceSynchronize());
	}
}

void wait_thread_stream(const Device& device)
{
	if (device.is_cuda()) {
		select_gpu(device.index);
		TOWER_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(thread_stream())));
	}
}

} // namespace tower
