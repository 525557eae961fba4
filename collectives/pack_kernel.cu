// The batched copy kernel behind copy_batch_device, kept apart so nvcc compiles no formatting code.
#include "collectives/pack_kernel.h"

namespace tower {

namespace {

// One block per task; its threads stride over the bytes, 16 at a time where alignment allows.
__global__ void copy_tasks(const CopyTaskTable table)
{
	const CopyTask task = table.tasks[blockIdx.x];
	char* dst = static_cast<char*>(task.dst);
	const char* src = static_cast<const char*>(task.src);
	const bool wide = ((reinterpret_cast<size_t>(dst) | reinterpret_cast<size_t>(src)) % 16) == 0;
	size_t done = 0;
	if (wide) {
		const size_t vectors = task.bytes / 16;
		for (size_t i = threadIdx.x; i < vectors; i += blockDim.x)
			reinterpret_cast<int4*>(dst)[i] = reinterpret_cast<const int4*>(src)[i];
		done = vectors * 16;
	}
	for (size_t i = done + threadIdx.x; i < task.bytes; i += blockDim.x)
		dst[i] = src[i];
}

} // namespace

cudaError_t launch_copy_tasks(const CopyTaskTable& table, size_t count, cudaStream_t stream)
{
	copy_tasks<<<static_cast<unsigned>(count), 256, 0, stream>>>(table);
	return cudaGetLastError();
}

} // namespace tower
