// Elementwise CUDA kernels: fill, axpy, bias with optional ReLU, bias gradient, ReLU.
#include "models/cuda/kernels.h"
#include "models/cuda/launch.cuh"

namespace tower::cuda {

namespace {

__global__ void fill_kernel(float* x, int64_t n, float value)
{
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		x[i] = value;
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, int64_t n)
{
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		y[i] += alpha * x[i];
}

__global__ void bias_act_kernel(float* y, const float* bias, int64_t n, int64_t channels, int64_t inner, bool relu)
{
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
		const float v = y[i] + bias[(i / inner) % channels];
		y[i] = relu ? fmaxf(v, 0.0f) : v;
	}
}

// One block per channel sums its outer*inner entries in a fixed order, so results are
// deterministic from run to run.
__global__ void bias_grad_kernel(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner,
				 bool accumulate)
{
	__shared__ float partial[block_threads];
	const int64_t c = blockIdx.x;
	const int64_t count = outer * inner;
	float sum = 0.0f;
	for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
		const int64_t o = j / inner, i = j % inner;
		sum += dy[(o * channels + c) * inner + i];
	}
	partial[threadIdx.x] = sum;
	__syncthreads();
	for (int step = block_threads / 2; step > 0; step /= 2) {
		if (threadIdx.x < step)
			partial[threadIdx.x] += partial[threadIdx.x + step];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		db[c] = accumulate ? db[c] + partial[0] : partial[0];
}

__global__ void relu_forward_kernel(const float* x, float* y, int64_t n)
{
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		y[i] = fmaxf(x[i], 0.0f);
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n)
{
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

} // namespace

void fill(float* x, int64_t n, float value)
{
	fill_kernel<<<grid_for(n), block_threads>>>(x, n, value);
	check_launch("fill");
}

void axpy(float alpha, const float* x, float* y, int64_t n)
{
	axpy_kernel<<<grid_for(n), block_threads>>>(alpha, x, y, n);
	check_launch("axpy");
}

void bias_act(float* y, const float* bias, int64_t outer, int64_t channels, int64_t inner, bool relu)
{
	const int64_t n = outer * channels * inner;
	bias_act_kernel<<<grid_for(n), block_threads>>>(y, bias, n, channels, inner, relu);
	check_launch("bias_act");
}

void bias_grad(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner, bool accumulate)
{
	if (channels == 0)
		return;
	bias_grad_kernel<<<static_cast<unsigned>(channels), block_threads>>>(dy, db, outer, channels, inner, accumulate);
	check_launch("bias_grad");
}

void relu_forward(const float* x, float* y, int64_t n)
{
	relu_forward_kernel<<<grid_for(n), block_threads>>>(x, y, n);
	check_launch("relu_forward");
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n)
{
	relu_backward_kernel<<<grid_for(n), block_threads>>>(y, dy, dx, n);
	check_launch("relu_backward");
}

} // namespace tower::cuda
