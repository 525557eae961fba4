// The update formulas as CUDA kernels, one thread per element in a grid-stride loop.
#include <algorithm>

#include "base/device/thread_stream.h"
#include "optim/update_kernels_cuda.h"

namespace tower {

namespace {

constexpr int threads_per_block = 256;
// Enough blocks to fill an H100 several times over; the grid-stride loop covers the rest.
constexpr int64_t max_blocks = 4096;

// The calling thread's stream (base/device/stream.h), where the gradients were finished.
cudaStream_t stream()
{
	return static_cast<cudaStream_t>(thread_stream());
}

unsigned blocks_for(int64_t n)
{
	return static_cast<unsigned>(std::clamp<int64_t>((n + threads_per_block - 1) / threads_per_block, 1, max_blocks));
}

__global__ void sgd_kernel(float* p, const float* g, int64_t n, SgdCoeffs c)
{
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		sgd_rule(p[i], g[i], c);
}

__global__ void momentum_kernel(float* p, const float* g, float* buf, int64_t n, SgdCoeffs c)
{
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		momentum_rule(p[i], g[i], buf[i], c);
}

// Reads the step counter on the device, so the host never waits for it.
__global__ void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, const int64_t* step, AdamCoeffs c)
{
	if (c.pytorch_form) {
		const PytorchAdamStep s = pytorch_adam_step(c, *step);
		for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
			pytorch_adam_rule(p[i], g[i], m[i], v[i], c, s);
		return;
	}
	const float step_size = adam_step_size(c, *step);
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		adam_rule(p[i], g[i], m[i], v[i], c, step_size);
}

__global__ void advance_step_kernel(int64_t* step)
{
	++*step;
}

} // namespace

cudaError_t launch_sgd_update(float* p, const float* g, int64_t n, const SgdCoeffs& c)
{
	sgd_kernel<<<blocks_for(n), threads_per_block, 0, stream()>>>(p, g, n, c);
	return cudaGetLastError();
}

cudaError_t launch_momentum_update(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c)
{
	momentum_kernel<<<blocks_for(n), threads_per_block, 0, stream()>>>(p, g, buf, n, c);
	return cudaGetLastError();
}

cudaError_t launch_adam_update(float* p, const float* g, float* m, float* v, int64_t n, const int64_t* step,
			       const AdamCoeffs& c)
{
	adam_kernel<<<blocks_for(n), threads_per_block, 0, stream()>>>(p, g, m, v, n, step, c);
	return cudaGetLastError();
}

cudaError_t launch_advance_step(int64_t* step)
{
	advance_step_kernel<<<1, 1, 0, stream()>>>(step);
	return cudaGetLastError();
}

} // namespace tower
