// Elementwise CUDA kernels: fill, axpy, bias with optional ReLU, bias gradient, ReLU, GELU, casts.
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/cuda/launch.cuh"

namespace tower::cuda {

namespace {

#define TOWER_GRID_STRIDE(i, n) \
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename T> __global__ void fill_kernel(T* x, int64_t n, float value)
{
	TOWER_GRID_STRIDE(i, n)
	x[i] = from_f32<T>(value);
}

template <typename T> __global__ void axpy_kernel(float alpha, const T* x, T* y, int64_t n)
{
	TOWER_GRID_STRIDE(i, n)
	y[i] = from_f32<T>(to_f32(y[i]) + alpha * to_f32(x[i]));
}

template <typename T>
__global__ void bias_act_kernel(T* y, const T* bias, int64_t n, int64_t channels, int64_t inner, bool relu)
{
	TOWER_GRID_STRIDE(i, n)
	{
		const float v = to_f32(y[i]) + to_f32(bias[(i / inner) % channels]);
		y[i] = from_f32<T>(relu ? fmaxf(v, 0.0f) : v);
	}
}

// Block (c, s) of a grid of channels x splits sums its share of channel c's outer*inner entries
// (every splits-th run of blockDim of them) in f32 into partials[c * splits + s]; every share and
// order is fixed, so results are deterministic from run to run.
template <typename T>
__global__ void bias_grad_partial_kernel(const T* dy, float* partials, int64_t channels, int64_t inner, int64_t count)
{
	__shared__ float partial[block_threads];
	const int64_t c = blockIdx.x, s = blockIdx.y, splits = gridDim.y;
	float sum = 0.0f;
	for (int64_t j = s * blockDim.x + threadIdx.x; j < count; j += splits * blockDim.x) {
		const int64_t o = j / inner, i = j % inner;
		sum += to_f32(dy[(o * channels + c) * inner + i]);
	}
	partial[threadIdx.x] = sum;
	__syncthreads();
	for (int step = block_threads / 2; step > 0; step /= 2) {
		if (threadIdx.x < step)
			partial[threadIdx.x] += partial[threadIdx.x + step];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		partials[c * splits + s] = partial[0];
}

// One thread per channel adds its partials in order and rounds once.
template <typename T>
__global__ void bias_grad_total_kernel(const float* partials, T* db, int64_t channels, int64_t splits, bool accumulate)
{
	TOWER_GRID_STRIDE(c, channels)
	{
		float sum = 0.0f;
		for (int64_t s = 0; s < splits; ++s)
			sum += partials[c * splits + s];
		db[c] = from_f32<T>(accumulate ? to_f32(db[c]) + sum : sum);
	}
}

template <typename T> __global__ void relu_forward_kernel(const T* x, T* y, int64_t n)
{
	TOWER_GRID_STRIDE(i, n)
	y[i] = from_f32<T>(fmaxf(to_f32(x[i]), 0.0f));
}

template <typename T> __global__ void relu_backward_kernel(const T* y, const T* dy, T* dx, int64_t n)
{
	TOWER_GRID_STRIDE(i, n)
	dx[i] = to_f32(y[i]) > 0.0f ? dy[i] : from_f32<T>(0.0f);
}

// GELU's tanh form, as the CPU backend computes it.
constexpr float gelu_k = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float gelu_c = 0.044715f;

template <typename T> __global__ void gelu_forward_kernel(const T* x, T* y, int64_t n)
{
	TOWER_GRID_STRIDE(i, n)
	{
		const float v = to_f32(x[i]);
		y[i] = from_f32<T>(0.5f * v * (1.0f + tanhf(gelu_k * (v + gelu_c * v * v * v))));
	}
}

template <typename T> __global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, int64_t n)
{
	TOWER_GRID_STRIDE(i, n)
	{
		const float v = to_f32(x[i]);
		const float t = tanhf(gelu_k * (v + gelu_c * v * v * v));
		const float slope = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * gelu_k * (1.0f + 3.0f * gelu_c * v * v);
		dx[i] = from_f32<T>(to_f32(dy[i]) * slope);
	}
}

template <typename S, typename D> __global__ void cast_kernel(const S* src, D* dst, int64_t n, bool accumulate)
{
	TOWER_GRID_STRIDE(i, n)
	dst[i] = from_f32<D>(accumulate ? to_f32(dst[i]) + to_f32(src[i]) : to_f32(src[i]));
}

} // namespace

void fill(DType t, void* x, int64_t n, float value)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		fill_kernel<<<grid_for(n), block_threads, 0, stream()>>>(static_cast<T*>(x), n, value);
	});
	check_launch("fill");
}

void axpy(DType t, float alpha, const void* x, void* y, int64_t n)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		axpy_kernel<<<grid_for(n), block_threads, 0, stream()>>>(alpha, static_cast<const T*>(x), static_cast<T*>(y), n);
	});
	check_launch("axpy");
}

void bias_act(DType t, void* y, const void* bias, int64_t outer, int64_t channels, int64_t inner, bool relu)
{
	const int64_t n = outer * channels * inner;
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		bias_act_kernel<<<grid_for(n), block_threads, 0, stream()>>>(static_cast<T*>(y), static_cast<const T*>(bias), n,
								 channels, inner, relu);
	});
	check_launch("bias_act");
}

void bias_grad(DType t, const void* dy, void* db, int64_t outer, int64_t channels, int64_t inner, bool accumulate,
	       float* partials)
{
	if (channels == 0)
		return;
	// Enough blocks to cover a GPU's multiprocessors a few times over, but no block with less
	// than a few loads per thread.
	const int64_t count = outer * inner;
	const int64_t wanted = std::max<int64_t>(1, 1024 / channels);
	const int64_t worthwhile = std::max<int64_t>(1, count / (4 * block_threads));
	const int64_t splits = std::min({wanted, worthwhile, bias_grad_splits});
	const dim3 grid(static_cast<unsigned>(channels), static_cast<unsigned>(splits));
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		bias_grad_partial_kernel<<<grid, block_threads, 0, stream()>>>(static_cast<const T*>(dy), partials, channels,
									     inner, count);
		check_launch("bias_grad");
		bias_grad_total_kernel<<<grid_for(channels), block_threads, 0, stream()>>>(partials, static_cast<T*>(db),
											 channels, splits, accumulate);
	});
	check_launch("bias_grad total");
}

void relu_forward(DType t, const void* x, void* y, int64_t n)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		relu_forward_kernel<<<grid_for(n), block_threads, 0, stream()>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
	});
	check_launch("relu_forward");
}

void relu_backward(DType t, const void* y, const void* dy, void* dx, int64_t n)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		relu_backward_kernel<<<grid_for(n), block_threads, 0, stream()>>>(static_cast<const T*>(y), static_cast<const T*>(dy),
								      static_cast<T*>(dx), n);
	});
	check_launch("relu_backward");
}

void gelu_forward(DType t, const void* x, void* y, int64_t n)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		gelu_forward_kernel<<<grid_for(n), block_threads, 0, stream()>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
	});
	check_launch("gelu_forward");
}

void gelu_backward(DType t, const void* x, const void* dy, void* dx, int64_t n)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		gelu_backward_kernel<<<grid_for(n), block_threads, 0, stream()>>>(static_cast<const T*>(x), static_cast<const T*>(dy),
								      static_cast<T*>(dx), n);
	});
	check_launch("gelu_backward");
}

void cast(DType st, const void* src, DType dt, void* dst, int64_t n, bool accumulate)
{
	with_float_type(st, [&](auto src_tag) {
		with_float_type(dt, [&](auto dst_tag) {
			using S = decltype(src_tag);
			using D = decltype(dst_tag);
			cast_kernel<<<grid_for(n), block_threads, 0, stream()>>>(static_cast<const S*>(src), static_cast<D*>(dst), n,
								     accumulate);
		});
	});
	check_launch("cast");
}

} // namespace tower::cuda
