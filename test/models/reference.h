// Float64 host reference of the built-in layers, independent of the ops backends, for tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tower::test {

using Vec = std::vector<double>;

// y[b, o] = sum_i x[b, i] w[o, i] + bias[o]
inline Vec ref_linear(const Vec& x, const Vec& w, const Vec& bias, int64_t batch, int64_t in, int64_t out)
{
	Vec y(static_cast<size_t>(batch * out));
	for (int64_t b = 0; b < batch; ++b)
		for (int64_t o = 0; o < out; ++o) {
			double s = bias[o];
			for (int64_t i = 0; i < in; ++i)
				s += x[b * in + i] * w[o * in + i];
			y[b * out + o] = s;
		}
	return y;
}

inline Vec ref_relu(Vec x)
{
	for (double& v : x)
		v = v > 0.0 ? v : 0.0;
	return x;
}

// Direct stride-1 convolution with zero padding; x [B, C, H, W], w [OC, C, k, k].
inline Vec ref_conv(const Vec& x, const Vec& w, const Vec& bias, int64_t batch, int64_t c_in, int64_t h, int64_t wd,
		    int64_t c_out, int64_t k, int64_t pad)
{
	const int64_t oh = h + 2 * pad - k + 1, ow = wd + 2 * pad - k + 1;
	Vec y(static_cast<size_t>(batch * c_out * oh * ow));
	for (int64_t b = 0; b < batch; ++b)
		for (int64_t o = 0; o < c_out; ++o)
			for (int64_t oy = 0; oy < oh; ++oy)
				for (int64_t ox = 0; ox < ow; ++ox) {
					double s = bias[o];
					for (int64_t c = 0; c < c_in; ++c)
						for (int64_t ky = 0; ky < k; ++ky)
							for (int64_t kx = 0; kx < k; ++kx) {
								const int64_t iy = oy + ky - pad, ix = ox + kx - pad;
								if (iy < 0 || iy >= h || ix < 0 || ix >= wd)
									continue;
								s += x[((b * c_in + c) * h + iy) * wd + ix] *
								     w[((o * c_in + c) * k + ky) * k + kx];
							}
					y[((b * c_out + o) * oh + oy) * ow + ox] = s;
				}
	return y;
}

// 2x2 stride-2 max pooling of [planes, h, w] (rows and columns past an even size are dropped).
inline Vec ref_maxpool(const Vec& x, int64_t planes, int64_t h, int64_t w)
{
	const int64_t oh = h / 2, ow = w / 2;
	Vec y(static_cast<size_t>(planes * oh * ow));
	for (int64_t p = 0; p < planes; ++p)
		for (int64_t oy = 0; oy < oh; ++oy)
			for (int64_t ox = 0; ox < ow; ++ox) {
				const double* in = &x[static_cast<size_t>(p * h * w)];
				const int64_t at = 2 * oy * w + 2 * ox;
				y[(p * oh + oy) * ow + ox] =
					std::max(std::max(in[at], in[at + 1]), std::max(in[at + w], in[at + w + 1]));
			}
	return y;
}

// Mean softmax cross-entropy of logits [B, K].
inline double ref_xent(const Vec& logits, const std::vector<int32_t>& labels, int64_t k)
{
	const int64_t batch = static_cast<int64_t>(labels.size());
	double total = 0.0;
	for (int64_t b = 0; b < batch; ++b) {
		double top = logits[b * k];
		for (int64_t j = 1; j < k; ++j)
			top = std::max(top, logits[b * k + j]);
		double sum = 0.0;
		for (int64_t j = 0; j < k; ++j)
			sum += std::exp(logits[b * k + j] - top);
		total += std::log(sum) + top - logits[b * k + labels[b]];
	}
	return total / static_cast<double>(batch);
}

inline Vec to_double(const std::vector<float>& v)
{
	return Vec(v.begin(), v.end());
}

} // namespace tower::test
