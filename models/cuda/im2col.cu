// Unfolding one image into convolution columns on the GPU, and folding gradients back.
#include "models/cuda/kernels.h"
#include "models/cuda/launch.cuh"

namespace tower::cuda {

namespace {

// One thread per column entry: row (c, ky, kx), column (oy, ox).
__global__ void im2col_kernel(ConvGeometry g, const float* image, float* col)
{
	const int64_t oh = g.out_height(), ow = g.out_width();
	const int64_t n = g.col_rows() * oh * ow;
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
		const int64_t ox = i % ow, oy = (i / ow) % oh, row = i / (oh * ow);
		const int64_t kx = row % g.kernel, ky = (row / g.kernel) % g.kernel, c = row / (g.kernel * g.kernel);
		const int64_t iy = oy + ky - g.padding, ix = ox + kx - g.padding;
		const bool inside = iy >= 0 && iy < g.height && ix >= 0 && ix < g.width;
		col[i] = inside ? image[(c * g.height + iy) * g.width + ix] : 0.0f;
	}
}

// One thread per image pixel gathers every column entry that read it: no atomics, and the sum
// order is fixed.
__global__ void col2im_kernel(ConvGeometry g, const float* col, float* image)
{
	const int64_t oh = g.out_height(), ow = g.out_width();
	const int64_t n = g.channels * g.height * g.width;
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
		const int64_t ix = i % g.width, iy = (i / g.width) % g.height, c = i / (g.height * g.width);
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
				sum += col[(row * oh + oy) * ow + ox];
			}
		}
		image[i] = sum;
	}
}

} // namespace

void im2col(const ConvGeometry& g, const float* image, float* col)
{
	im2col_kernel<<<grid_for(g.col_rows() * g.col_cols()), block_threads>>>(g, image, col);
	check_launch("im2col");
}

void col2im(const ConvGeometry& g, const float* col, float* image)
{
	col2im_kernel<<<grid_for(g.channels * g.height * g.width), block_threads>>>(g, col, image);
	check_launch("col2im");
}

} // namespace tower::cuda
