// 2x2 stride-2 max pooling on the GPU, forward and backward.
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/cuda/launch.cuh"

namespace tower::cuda {

namespace {

template <typename T>
__global__ void maxpool_forward_kernel(const T* x, T* y, int32_t* argmax, int64_t planes, int64_t h, int64_t w)
{
	const int64_t oh = h / 2, ow = w / 2, n = planes * oh * ow;
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
		const int64_t ox = i % ow, oy = (i / ow) % oh, p = i / (oh * ow);
		const T* in = x + p * h * w;
		// The first of equal maxima wins, in row-major order, as on the CPU.
		int64_t best = 2 * oy * w + 2 * ox;
		const int64_t cands[3] = {best + 1, best + w, best + w + 1};
		for (int64_t cand : cands)
			if (to_f32(in[cand]) > to_f32(in[best]))
				best = cand;
		y[i] = in[best];
		argmax[i] = static_cast<int32_t>(best);
	}
}

// One thread per input element: it takes dy of its window when it was the window's maximum,
// so dx is written once, without atomics.
template <typename T>
__global__ void maxpool_backward_kernel(const T* dy, const int32_t* argmax, T* dx, int64_t planes, int64_t h,
					int64_t w)
{
	const int64_t oh = h / 2, ow = w / 2, n = planes * h * w;
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
		const int64_t ix = i % w, iy = (i / w) % h, p = i / (h * w);
		const int64_t oy = iy / 2, ox = ix / 2;
		T g = from_f32<T>(0.0f);
		if (oy < oh && ox < ow) {
			const int64_t o = (p * oh + oy) * ow + ox;
			if (argmax[o] == iy * w + ix)
				g = dy[o];
		}
		dx[i] = g;
	}
}

} // namespace

void maxpool_forward(DType t, const void* x, void* y, int32_t* argmax, int64_t planes, int64_t h, int64_t w)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		maxpool_forward_kernel<<<grid_for(planes * (h / 2) * (w / 2)), block_threads, 0, stream()>>>(
			static_cast<const T*>(x), static_cast<T*>(y), argmax, planes, h, w);
	});
	check_launch("maxpool_forward");
}

void maxpool_backward(DType t, const void* dy, const int32_t* argmax, void* dx, int64_t planes, int64_t h,
		      int64_t w)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		maxpool_backward_kernel<<<grid_for(planes * h * w), block_threads, 0, stream()>>>(
			static_cast<const T*>(dy), argmax, static_cast<T*>(dx), planes, h, w);
	});
	check_launch("maxpool_backward");
}

} // namespace tower::cuda
