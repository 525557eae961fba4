// The pointer arrays of a batched GEMM over two-level strided views (sequences, then heads): one
// cuBLAS call over every matrix instead of one call per sequence.
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/cuda/launch.cuh"

namespace tower::cuda {

namespace {

__global__ void batch_pointers_kernel(BatchOperands operands, int64_t batch, int64_t groups, char** pointers)
{
	const int64_t items = batch * groups;
	for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < items; n += int64_t(gridDim.x) * blockDim.x) {
		const int64_t g = n / batch, i = n % batch;
		for (int v = 0; v < 3; ++v) {
			const StridedOperand& o = operands.operand[v];
			pointers[v * items + n] = static_cast<char*>(o.base) + (g * o.group_stride + i * o.stride) * o.element_bytes;
		}
	}
}

} // namespace

void batch_pointers(const BatchOperands& operands, int64_t batch, int64_t groups, void** pointers)
{
	const int64_t items = batch * groups;
	if (items == 0)
		return;
	batch_pointers_kernel<<<grid_for(items), block_threads, 0, stream()>>>(operands, batch, groups,
									       reinterpret_cast<char**>(pointers));
	check_launch("batch_pointers");
}

} // namespace tower::cuda
