// LayerNorm on the GPU: one warp per row forward and for the input gradient; the gain and bias
// gradients summed over rows per column in a fixed order (deterministic).
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/cuda/launch.cuh"

namespace tower::cuda {

namespace {

constexpr int warp = warp_lanes;
constexpr int rows_per_block = block_threads / warp;

template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const float* gamma, const float* beta, float eps, T* y,
					 float* mean, float* rstd, int64_t rows, int64_t c)
{
	const int64_t r = blockIdx.x * int64_t(rows_per_block) + threadIdx.x / warp;
	const int lane = threadIdx.x % warp;
	if (r >= rows)
		return;
	const T* in = x + r * c;
	float sum = 0.0f;
	for (int64_t i = lane; i < c; i += warp)
		sum += to_f32(in[i]);
	const float m = warp_sum(sum) / static_cast<float>(c);
	float squares = 0.0f;
	for (int64_t i = lane; i < c; i += warp) {
		const float d = to_f32(in[i]) - m;
		squares += d * d;
	}
	const float s = rsqrtf(warp_sum(squares) / static_cast<float>(c) + eps);
	for (int64_t i = lane; i < c; i += warp)
		y[r * c + i] = from_f32<T>((to_f32(in[i]) - m) * s * gamma[i] + beta[i]);
	if (lane == 0) {
		mean[r] = m;
		rstd[r] = s;
	}
}

template <typename T>
__global__ void layernorm_input_grad_kernel(const T* dy, const T* x, const float* gamma, const float* mean,
					    const float* rstd, T* dx, int64_t rows, int64_t c)
{
	const int64_t r = blockIdx.x * int64_t(rows_per_block) + threadIdx.x / warp;
	const int lane = threadIdx.x % warp;
	if (r >= rows)
		return;
	const float m = mean[r], s = rstd[r];
	float dn_sum = 0.0f, dn_xhat_sum = 0.0f;
	for (int64_t i = lane; i < c; i += warp) {
		const float dn = to_f32(dy[r * c + i]) * gamma[i];
		dn_sum += dn;
		dn_xhat_sum += dn * (to_f32(x[r * c + i]) - m) * s;
	}
	const float dn_mean = warp_sum(dn_sum) / static_cast<float>(c);
	const float dn_xhat_mean = warp_sum(dn_xhat_sum) / static_cast<float>(c);
	for (int64_t i = lane; i < c; i += warp) {
		const float xhat = (to_f32(x[r * c + i]) - m) * s;
		dx[r * c + i] = from_f32<T>(s * (to_f32(dy[r * c + i]) * gamma[i] - dn_mean - xhat * dn_xhat_mean));
	}
}

// A block of 32 columns x 8 row groups: each thread sums every 8th row of its column, and the 8
// partial sums are added in a fixed order.
template <typename T>
__global__ void layernorm_param_grad_kernel(const T* dy, const T* x, const float* mean, const float* rstd,
					    float* dgamma, float* dbeta, int64_t rows, int64_t c, bool accumulate)
{
	__shared__ float g_part[rows_per_block][warp];
	__shared__ float b_part[rows_per_block][warp];
	const int lane = threadIdx.x % warp, group = threadIdx.x / warp;
	const int64_t col = blockIdx.x * int64_t(warp) + lane;
	float g = 0.0f, b = 0.0f;
	if (col < c)
		for (int64_t r = group; r < rows; r += rows_per_block) {
			const float d = to_f32(dy[r * c + col]);
			g += d * (to_f32(x[r * c + col]) - mean[r]) * rstd[r];
			b += d;
		}
	g_part[group][lane] = g;
	b_part[group][lane] = b;
	__syncthreads();
	if (group != 0 || col >= c)
		return;
	for (int k = 1; k < rows_per_block; ++k) {
		g += g_part[k][lane];
		b += b_part[k][lane];
	}
	dgamma[col] = accumulate ? dgamma[col] + g : g;
	dbeta[col] = accumulate ? dbeta[col] + b : b;
}

unsigned row_blocks(int64_t rows)
{
	return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}

} // namespace

void layernorm_forward(DType t, const void* x, const float* gamma, const float* beta, float eps, void* y,
		       float* mean, float* rstd, int64_t rows, int64_t channels)
{
	if (rows == 0)
		return;
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		layernorm_forward_kernel<<<row_blocks(rows), block_threads, 0, stream()>>>(
			static_cast<const T*>(x), gamma, beta, eps, static_cast<T*>(y), mean, rstd, rows, channels);
	});
	check_launch("layernorm_forward");
}

void layernorm_backward(DType t, const void* dy, const void* x, const float* gamma, const float* mean,
			const float* rstd, void* dx, float* dgamma, float* dbeta, int64_t rows, int64_t channels,
			bool accumulate)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		if (rows > 0)
			layernorm_input_grad_kernel<<<row_blocks(rows), block_threads, 0, stream()>>>(
				static_cast<const T*>(dy), static_cast<const T*>(x), gamma, mean, rstd,
				static_cast<T*>(dx), rows, channels);
		const auto column_blocks = static_cast<unsigned>((channels + warp - 1) / warp);
		layernorm_param_grad_kernel<<<column_blocks, block_threads, 0, stream()>>>(static_cast<const T*>(dy),
									       static_cast<const T*>(x), mean, rstd,
									       dgamma, dbeta, rows, channels, accumulate);
	});
	check_launch("layernorm_backward");
}

} // namespace tower::cuda
