// Memory on a device: allocate, free, copy and fill bytes on the CPU or a CUDA device.
#pragma once

#include <cstddef>

#include "base/device/device.h"

namespace tower {

// Allocates `bytes` on `device`, aligned to 64 bytes on the CPU (cudaMalloc's 256 on a GPU).
// Zero bytes gives a null pointer. Throws tower::Error naming the size when allocation fails.
void* device_alloc(const Device& device, size_t bytes);
void device_free(const Device& device, void* pointer) noexcept;

// Copies `bytes` between any two devices (host to host, host to GPU, GPU to host, GPU to GPU)
// and waits for the copy to finish. On a GPU the copy goes to this thread's stream
// (base/device/stream.h), after the work queued there.
void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device, size_t bytes);

// Queues a copy from host memory to `dst` on this thread's stream and returns without waiting:
// work queued on the stream later sees the copied bytes. `src` must stay as it is until a
// StreamMarker recorded after this call is reached, and should come from pinned_host_alloc (else
// CUDA copies it through a staging buffer and the call waits for that). A CPU `dst`: a memcpy.
void upload_bytes_async(void* dst, const Device& dst_device, const void* src, size_t bytes);

// Host memory that a GPU copies from directly (page-locked in a CUDA build, on the GPU's host);
// plain host memory for the CPU or without CUDA. Zero bytes gives a null pointer.
void* pinned_host_alloc(const Device& device, size_t bytes);
void pinned_host_free(const Device& device, void* pointer) noexcept;

// Frees pinned_host_alloc's memory, for std::unique_ptr.
struct PinnedHostFree {
	Device device;
	void operator()(void* pointer) const noexcept { pinned_host_free(device, pointer); }
};

// Sets `bytes` at `pointer` to zero (on a GPU, queued on this thread's stream).
void zero_bytes(void* pointer, const Device& device, size_t bytes);

// The most memory this rank has held on `device`: the process's peak resident set on the CPU; on a
// GPU, the high-water mark of the device's memory in use (CUDA's context, cuBLAS's and NCCL's
// buffers included) sampled after each of tower's allocations and at each call, and never below
// the high-water mark of tower's own allocations (base/tensor/memory_ledger.h).
size_t peak_memory_bytes(const Device& device);

// Waits for all work queued on the device (a no-op on the CPU).
void device_synchronize(const Device& device);

// Waits for the work queued so far on this thread's stream (base/device/stream.h): the default
// stream, where tower's kernels, cuBLAS and copies run, unless the thread adopted a side stream;
// not for a collective in flight on a communication stream (a no-op on the CPU). Timings read the
// clock after it, so they count kernels rather than their launches.
void wait_thread_stream(const Device& device);

} // namespace tower
