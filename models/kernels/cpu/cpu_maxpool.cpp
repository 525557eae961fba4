// 2x2 stride-2 max pooling on the CPU, forward and backward.
#include <algorithm>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/ops_checks.h"

namespace tower {

void CpuOps::maxpool_forward(const Tensor& x, const Tensor& y, const Tensor& argmax) const
{
	check_maxpool(x, y, argmax);
	const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
	const int64_t oh = h / 2, ow = w / 2;
	const F32Copy fx(x, true), fy(y, false);
	for (int64_t p = 0; p < planes; ++p) {
		const float* in = fx.data() + p * h * w;
		float* out = fy.data() + p * oh * ow;
		int32_t* idx = argmax.data_as<int32_t>() + p * oh * ow;
		for (int64_t oy = 0; oy < oh; ++oy)
			for (int64_t ox = 0; ox < ow; ++ox) {
				// The first of equal maxima wins, in row-major order, as on the GPU.
				int64_t best = 2 * oy * w + 2 * ox;
				for (int64_t cand : {best + 1, best + w, best + w + 1})
					if (in[cand] > in[best])
						best = cand;
				out[oy * ow + ox] = in[best];
				idx[oy * ow + ox] = static_cast<int32_t>(best);
			}
	}
	fy.store();
}

void CpuOps::maxpool_backward(const Tensor& dy, const Tensor& argmax, const Tensor& dx) const
{
	check_maxpool(dx, dy, argmax);
	const int64_t planes = dx.dim(0) * dx.dim(1), plane_in = dx.dim(2) * dx.dim(3);
	const int64_t plane_out = dy.dim(2) * dy.dim(3);
	const F32Copy fdy(dy, true), fdx(dx, false);
	std::fill_n(fdx.data(), dx.numel(), 0.0f);
	for (int64_t p = 0; p < planes; ++p) {
		const float* g = fdy.data() + p * plane_out;
		const int32_t* idx = argmax.data_as<int32_t>() + p * plane_out;
		float* out = fdx.data() + p * plane_in;
		// Windows do not overlap, so every input receives at most one gradient.
		for (int64_t i = 0; i < plane_out; ++i)
			out[idx[i]] = g[i];
	}
	fdx.store();
}

} // namespace tower
