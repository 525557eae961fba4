// Gradient hygiene on the GPU: a fixed-order sum of squares (which also detects inf and NaN) and scaling.
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/cuda/launch.cuh"

namespace tower::cuda {

namespace {

// Adds block_threads doubles of shared memory in a fixed order; the result lands in values[0].
__device__ void block_sum(double* values)
{
	__syncthreads();
	for (int step = block_threads / 2; step > 0; step /= 2) {
		if (threadIdx.x < step)
			values[threadIdx.x] += values[threadIdx.x + step];
		__syncthreads();
	}
}

// Each block writes the sum of its grid-stride share of x^2; f64 cannot overflow on finite f32
// input, so a non-finite total means a non-finite element.
__global__ void square_partials_kernel(const float* x, int64_t n, double* partials)
{
	__shared__ double sums[block_threads];
	double s = 0.0;
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		s += static_cast<double>(x[i]) * x[i];
	sums[threadIdx.x] = s;
	block_sum(sums);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = sums[0];
}

__global__ void sum_partials_kernel(const double* partials, int64_t count, double* out, bool accumulate)
{
	__shared__ double sums[block_threads];
	double s = 0.0;
	for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
		s += partials[i];
	sums[threadIdx.x] = s;
	block_sum(sums);
	if (threadIdx.x == 0)
		*out = accumulate ? *out + sums[0] : sums[0];
}

__global__ void scale_kernel(float* x, int64_t n, float factor)
{
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		x[i] *= factor;
}

} // namespace

void sum_of_squares(const float* x, int64_t n, double* partials, double* out, bool accumulate)
{
	const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(grid_for(n), max_partials));
	square_partials_kernel<<<blocks, block_threads, 0, stream()>>>(x, n, partials);
	check_launch("sum_of_squares");
	sum_partials_kernel<<<1, block_threads, 0, stream()>>>(partials, blocks, out, accumulate);
	check_launch("sum_of_squares total");
}

void scale(float* x, int64_t n, float factor)
{
	scale_kernel<<<grid_for(n), block_threads, 0, stream()>>>(x, n, factor);
	check_launch("scale");
}

} // namespace tower::cuda
