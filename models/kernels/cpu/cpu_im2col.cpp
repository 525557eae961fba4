// Unfolding images into convolution columns on the CPU, and folding gradients back.
#include <algorithm>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/ops_checks.h"

namespace tower {

namespace {

// The output columns [lo, hi) whose input column ox + kx - padding lies inside the image.
struct Span {
	int64_t lo;
	int64_t hi;
};

Span valid_span(int64_t shift, int64_t in_size, int64_t out_size)
{
	return {std::clamp<int64_t>(-shift, 0, out_size), std::clamp<int64_t>(in_size - shift, 0, out_size)};
}

} // namespace

void CpuOps::im2col(const ConvGeometry& g, const Tensor& images, const Tensor& col) const
{
	check_im2col(g, images, col);
	const int64_t oh = g.out_height(), ow = g.out_width(), pixels = oh * ow;
	const int64_t n = images.numel() / (g.channels * g.height * g.width);
	const F32Copy fimage(images, true), fcol(col, false);
	// Row (c, ky, kx) of the columns holds image 0's pixels, then image 1's, ...
	for (int64_t i = 0; i < n; ++i) {
		const float* in = fimage.data() + i * g.channels * g.height * g.width;
		float* out = fcol.data() + i * pixels;
		for (int64_t c = 0; c < g.channels; ++c)
			for (int64_t ky = 0; ky < g.kernel; ++ky)
				for (int64_t kx = 0; kx < g.kernel; ++kx, out += n * pixels) {
					const Span xs = valid_span(kx - g.padding, g.width, ow);
					for (int64_t oy = 0; oy < oh; ++oy) {
						float* dst = out + oy * ow;
						const int64_t iy = oy + ky - g.padding;
						if (iy < 0 || iy >= g.height) {
							std::fill_n(dst, ow, 0.0f);
							continue;
						}
						const float* src = in + (c * g.height + iy) * g.width + kx - g.padding;
						std::fill(dst, dst + xs.lo, 0.0f);
						std::copy(src + xs.lo, src + xs.hi, dst + xs.lo);
						std::fill(dst + xs.hi, dst + ow, 0.0f);
					}
				}
	}
	fcol.store();
}

void CpuOps::col2im(const ConvGeometry& g, const Tensor& col, const Tensor& images) const
{
	check_im2col(g, images, col);
	const int64_t oh = g.out_height(), ow = g.out_width(), pixels = oh * ow;
	const int64_t n = images.numel() / (g.channels * g.height * g.width);
	const F32Copy fcol(col, true), fimage(images, false);
	std::fill_n(fimage.data(), images.numel(), 0.0f);
	for (int64_t i = 0; i < n; ++i) {
		const float* in = fcol.data() + i * pixels;
		float* out = fimage.data() + i * g.channels * g.height * g.width;
		for (int64_t c = 0; c < g.channels; ++c)
			for (int64_t ky = 0; ky < g.kernel; ++ky)
				for (int64_t kx = 0; kx < g.kernel; ++kx, in += n * pixels) {
					const Span xs = valid_span(kx - g.padding, g.width, ow);
					for (int64_t oy = 0; oy < oh; ++oy) {
						const int64_t iy = oy + ky - g.padding;
						if (iy < 0 || iy >= g.height)
							continue;
						const float* src = in + oy * ow;
						float* dst = out + (c * g.height + iy) * g.width + kx - g.padding;
						for (int64_t ox = xs.lo; ox < xs.hi; ++ox)
							dst[ox] += src[ox];
					}
				}
	}
	fimage.store();
}

} // namespace tower
