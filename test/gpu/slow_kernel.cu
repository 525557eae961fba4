// A deliberately slow producer kernel for GPU tests of stream ordering.
#include "test/gpu/slow_kernel.h"

#include <cuda_runtime.h>

#include "base/device/thread_stream.h"

namespace tower::test {

namespace {

__device__ unsigned long long global_nanoseconds()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void slow_fill_kernel(float* data, size_t count, float first, float step, unsigned long long wait_ns)
{
	// Every thread waits, so no element is written before the delay has passed.
	const unsigned long long start = global_nanoseconds();
	while (global_nanoseconds() - start < wait_ns)
		__nanosleep(1000);
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
		data[i] = first + static_cast<float>(i) * step;
}

} // namespace

int launch_slow_fill(float* data, size_t count, float first, float step, int milliseconds)
{
	slow_fill_kernel<<<8, 256, 0, static_cast<cudaStream_t>(thread_stream())>>>(data, count, first, step, static_cast<unsigned long long>(milliseconds) * 1000000ull);
	return static_cast<int>(cudaGetLastError());
}

} // namespace tower::test
