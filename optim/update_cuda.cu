// The update formulas as CUDA kernels, one thread per element in a grid-stride loop.
#include <algorithm>

#include "optim/update.h"
#include "runtime/cuda_check.h"

namespace tower {

namespace {

constexpr int threads_per_block = 256;
// Enough blocks to fill an H100 several times over; the grid-stride loop covers the rest.
constexpr int64_t max_blocks = 4096;

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

__global__ void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, const int64_t* step, AdamCoeffs c)
{
	const float step_size = adam_step_size(c, *step);
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		adam_rule(p[i], g[i], m[i], v[i], c, step_size);
}

__global__ void advance_step_kernel(int64_t* step)
{
	++*step;
}

} // namespace

void sgd_update_cuda(float* p, const float* g, int64_t n, const SgdCoeffs& c)
{
	if (n == 0)
		return;
	sgd_kernel<<<blocks_for(n), threads_per_block>>>(p, g, n, c);
	TOWER_CUDA(cudaGetLastError());
}

void momentum_update_cuda(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c)
{
	if (n == 0)
		return;
	momentum_kernel<<<blocks_for(n), threads_per_block>>>(p, g, buf, n, c);
	TOWER_CUDA(cudaGetLastError());
}

void adam_update_cuda(float* p, const float* g, float* m, float* v, int64_t n, const int64_t* step, const AdamCoeffs& c)
{
	if (n == 0)
		return;
	adam_kernel<<<blocks_for(n), threads_per_block>>>(p, g, m, v, n, step, c);
	TOWER_CUDA(cudaGetLastError());
}

void advance_step_cuda(int64_t* step)
{
	advance_step_kernel<<<1, 1>>>(step);
	TOWER_CUDA(cudaGetLastError());
}

} // namespace tower
