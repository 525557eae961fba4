// Attention's own GPU kernels: the causal softmax (one warp per row) and its gradient, and
// permute_heads, the rows <-> [B, H, T, D] reorder (the default convolution's output channels use
// it; attention reads its heads in place).
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/cuda/launch.cuh"

namespace tower::cuda {

namespace {

constexpr int warp = warp_lanes;
constexpr int rows_per_block = block_threads / warp;

template <typename T>
__global__ void causal_softmax_kernel(const T* scores, float scale, T* probs, int64_t rows, int64_t t)
{
	const int64_t row = blockIdx.x * int64_t(rows_per_block) + threadIdx.x / warp;
	const int lane = threadIdx.x % warp;
	if (row >= rows)
		return;
	const int64_t i = row % t; // the query's position: it sees keys 0..i
	const T* s = scores + row * t;
	T* p = probs + row * t;
	float top = -INFINITY;
	for (int64_t j = lane; j <= i; j += warp)
		top = fmaxf(top, to_f32(s[j]));
	top = warp_max(top);
	float sum = 0.0f;
	for (int64_t j = lane; j <= i; j += warp)
		sum += expf(scale * (to_f32(s[j]) - top));
	const float inv = 1.0f / warp_sum(sum);
	for (int64_t j = lane; j < t; j += warp)
		p[j] = from_f32<T>(j <= i ? expf(scale * (to_f32(s[j]) - top)) * inv : 0.0f);
}

template <typename T>
__global__ void causal_softmax_backward_kernel(const T* probs, const T* dprobs, float scale, T* dscores, int64_t rows,
					       int64_t t)
{
	const int64_t row = blockIdx.x * int64_t(rows_per_block) + threadIdx.x / warp;
	const int lane = threadIdx.x % warp;
	if (row >= rows)
		return;
	const int64_t i = row % t;
	const T* p = probs + row * t;
	const T* dp = dprobs + row * t;
	T* ds = dscores + row * t;
	float dot = 0.0f;
	for (int64_t j = lane; j <= i; j += warp)
		dot += to_f32(p[j]) * to_f32(dp[j]);
	dot = warp_sum(dot);
	// Every lane has read its entries of dp before the shuffle above, so ds may be dp.
	for (int64_t j = lane; j < t; j += warp)
		ds[j] = from_f32<T>(j <= i ? scale * to_f32(p[j]) * (to_f32(dp[j]) - dot) : 0.0f);
}

template <typename T>
__global__ void permute_heads_kernel(T* rows, int64_t width, int64_t offset, T* heads, int64_t b, int64_t h, int64_t t,
				     int64_t d, bool to_heads)
{
	const int64_t n = b * h * t * d;
	for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
		const int64_t di = e % d, ti = (e / d) % t, hi = (e / (d * t)) % h, bi = e / (d * t * h);
		T& row = rows[(bi * t + ti) * width + offset + hi * d + di];
		if (to_heads)
			heads[e] = row;
		else
			row = heads[e];
	}
}

} // namespace

void causal_softmax_forward(DType t, const void* scores, float scale, void* probs, int64_t n, int64_t time)
{
	const int64_t rows = n * time;
	if (rows == 0)
		return;
	const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		causal_softmax_kernel<<<blocks, block_threads, 0, stream()>>>(static_cast<const T*>(scores), scale,
								  static_cast<T*>(probs), rows, time);
	});
	check_launch("causal_softmax_forward");
}

void causal_softmax_backward(DType t, const void* probs, const void* dprobs, float scale, void* dscores, int64_t n,
			     int64_t time)
{
	const int64_t rows = n * time;
	if (rows == 0)
		return;
	const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		causal_softmax_backward_kernel<<<blocks, block_threads, 0, stream()>>>(static_cast<const T*>(probs),
									   static_cast<const T*>(dprobs), scale,
									   static_cast<T*>(dscores), rows, time);
	});
	check_launch("causal_softmax_backward");
}

void permute_heads(DType t, void* rows, int64_t width, int64_t offset, void* heads, int64_t batch, int64_t head_count,
		   int64_t time, int64_t head_dim, bool to_heads)
{
	const int64_t n = batch * head_count * time * head_dim;
	if (n == 0)
		return;
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		permute_heads_kernel<<<grid_for(n), block_threads, 0, stream()>>>(static_cast<T*>(rows), width, offset,
								      static_cast<T*>(heads), batch, head_count, time,
								      head_dim, to_heads);
	});
	check_launch("permute_heads");
}

} // namespace tower::cuda
