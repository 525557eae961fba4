// Unfolding images into convolution columns on the GPU, and folding gradients back.
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/cuda/launch.cuh"

namespace tower::cuda {

namespace {

// One thread per column entry: row (c, ky, kx), column (image, oy, ox); a row holds image 0's
// output pixels, then image 1's, ...
template <typename T> __global__ void im2col_kernel(ConvGeometry g, int64_t images, const T* image, T* col)
{
	const int64_t oh = g.out_height(), ow = g.out_width(), plane = g.channels * g.height * g.width;
	const int64_t n = g.col_rows() * images * oh * ow;
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
		const int64_t ox = i % ow, oy = (i / ow) % oh, img = (i / (oh * ow)) % images;
		const int64_t row = i / (images * oh * ow);
		const int64_t kx = row % g.kernel, ky = (row / g.kernel) % g.kernel, c = row / (g.kernel * g.kernel);
		const int64_t iy = oy + ky - g.padding, ix = ox + kx - g.padding;
		const bool inside = iy >= 0 && iy < g.height && ix >= 0 && ix < g.width;
		col[i] = inside ? image[img * plane + (c * g.height + iy) * g.width + ix] : from_f32<T>(0.0f);
	}
}

// One thread per image pixel gathers every column entry that read it: no atomics, and the sum
// order is fixed.
template <typename T> __global__ void col2im_kernel(ConvGeometry g, int64_t images, const T* col, T* image)
{
	const int64_t oh = g.out_height(), ow = g.out_width(), plane = g.channels * g.height * g.width;
	const int64_t n = images * plane;
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
		const int64_t ix = i % g.width, iy = (i / g.width) % g.height, c = (i / (g.height * g.width)) % g.channels;
		const int64_t img = i / plane;
		float sum = 0.0f;
		for (int64_t ky = 0; ky < g.kernel; ++ky) {
			const int64_t oy = iy + g.padding - ky;
			if (oy < 0 || oy >= oh)
				continue;
			for (int64_t kx = 0; kx < g.kernel; ++kx) {
				const int64_t ox = ix + g.padding - kx;
				if (ox < 0 || ox >= ow)
					continue;
				const int64_t row = (c * g.kernel + ky) * g.kernel + kx;
				sum += to_f32(col[((row * images + img) * oh + oy) * ow + ox]);
			}
		}
		image[i] = from_f32<T>(sum);
	}
}

} // namespace

void im2col(DType t, const ConvGeometry& g, int64_t images, const void* image, void* col)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		im2col_kernel<<<grid_for(g.col_rows() * images * g.col_cols()), block_threads, 0, stream()>>>(
			g, images, static_cast<const T*>(image), static_cast<T*>(col));
	});
	check_launch("im2col");
}

void col2im(DType t, const ConvGeometry& g, int64_t images, const void* col, void* image)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		col2im_kernel<<<grid_for(images * g.channels * g.height * g.width), block_threads, 0, stream()>>>(
			g, images, static_cast<const T*>(col), static_cast<T*>(image));
	});
	check_launch("col2im");
}

} // namespace tower::cuda
