// Elementwise CPU ops: fill, accumulate, bias with optional ReLU, bias gradient, ReLU, GELU, casts.
#include <algorithm>
#include <cmath>
#include <vector>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/cpu/vector_math.h"
#include "models/kernels/ops_checks.h"
#include "base/error.h"

namespace tower {

namespace {

// The f32 loops; the public operations widen 16-bit operands around them.

void bias_act_f32(float* __restrict row, const float* __restrict b, int64_t outer, int64_t channels, int64_t inner,
		  bool relu)
{
	// One pass over y: the bias and the ReLU are applied while the row is in cache. The loops
	// run along the contiguous dimension so they vectorize: across channels for linear layers
	// (inner 1), across pixels for convolutions.
	if (inner == 1) {
		for (int64_t o = 0; o < outer; ++o, row += channels)
			if (relu)
				for (int64_t c = 0; c < channels; ++c)
					row[c] = std::max(row[c] + b[c], 0.0f);
			else
				for (int64_t c = 0; c < channels; ++c)
					row[c] += b[c];
		return;
	}
	for (int64_t o = 0; o < outer; ++o) {
		for (int64_t c = 0; c < channels; ++c, row += inner) {
			const float bc = b[c];
			if (relu)
				for (int64_t i = 0; i < inner; ++i)
					row[i] = std::max(row[i] + bc, 0.0f);
			else
				for (int64_t i = 0; i < inner; ++i)
					row[i] += bc;
		}
	}
}

// Linear layers' rows, `block` channels at a time: their sums stay in registers over all the
// rows (a row at a time, each sum was loaded and stored again for every row), each still adding
// the rows in order, so the bits are the same.
void column_sums_f32(const float* __restrict rows, float* __restrict g, int64_t outer, int64_t channels)
{
	constexpr int64_t block = 64;
	int64_t c0 = 0;
	for (; c0 + block <= channels; c0 += block) {
		float sums[block];
		for (int64_t c = 0; c < block; ++c)
			sums[c] = g[c0 + c];
		for (int64_t o = 0; o < outer; ++o)
			for (int64_t c = 0; c < block; ++c)
				sums[c] += rows[o * channels + c0 + c];
		for (int64_t c = 0; c < block; ++c)
			g[c0 + c] = sums[c];
	}
	for (int64_t o = 0; o < outer; ++o)
		for (int64_t c = c0; c < channels; ++c)
			g[c] += rows[o * channels + c];
}

void bias_grad_f32(const float* __restrict row, float* __restrict g, int64_t outer, int64_t channels, int64_t inner)
{
	if (inner == 1) {
		column_sums_f32(row, g, outer, channels);
		return;
	}
	for (int64_t o = 0; o < outer; ++o)
		for (int64_t c = 0; c < channels; ++c, row += inner)
			g[c] += lane_sum(inner, [&](int64_t i) { return row[i]; });
}

} // namespace

void CpuOps::fill(const Tensor& x, float value) const
{
	expect_float(x, "filled tensor");
	for_each_piece(x.numel(), f32_piece_elements, [&](int64_t start, int64_t count) {
		float scratch[f32_piece_elements];
		const F32Piece px(x, start, count, scratch, false);
		std::fill_n(px.data(), count, value);
		px.store();
	});
}

void CpuOps::accumulate(float alpha, const Tensor& x, const Tensor& y) const
{
	expect_float(x, "accumulated tensor");
	expect_same_dtype(x, y, "accumulate");
	expect_same_numel(x, y, "accumulate");
	for_each_piece(x.numel(), f32_piece_elements, [&](int64_t start, int64_t count) {
		float sx[f32_piece_elements], sy[f32_piece_elements];
		const F32Piece px(x, start, count, sx, true), py(y, start, count, sy, true);
		const float* __restrict xs = px.data();
		float* __restrict ys = py.data();
		for (int64_t i = 0; i < count; ++i)
			ys[i] += alpha * xs[i];
		py.store();
	});
}

void CpuOps::bias_act(const Tensor& y, const Tensor& bias, int64_t inner, bool relu) const
{
	const int64_t outer = checked_bias_outer(y, bias, inner);
	const F32Copy fb(bias, true);
	// Whole slices of [channels, inner] at a time, as many as fit a piece.
	const int64_t slice = bias.numel() * inner;
	const int64_t slices = std::max<int64_t>(1, f32_piece_elements / std::max<int64_t>(slice, 1));
	std::vector<float> scratch(y.dtype() == DType::f32 ? 0 : static_cast<size_t>(std::min(outer, slices) * slice));
	for_each_piece(outer, slices, [&](int64_t first, int64_t count) {
		const F32Piece py(y, first * slice, count * slice, scratch.data(), true);
		bias_act_f32(py.data(), fb.data(), count, bias.numel(), inner, relu);
		py.store();
	});
}

void CpuOps::bias_grad(const Tensor& dy, const Tensor& db, int64_t inner, bool accumulate) const
{
	const int64_t outer = checked_bias_outer(dy, db, inner);
	const F32Copy fdb(db, accumulate);
	if (!accumulate)
		std::fill_n(fdb.data(), db.numel(), 0.0f);
	if (dy.dtype() == DType::f32) { // in place, all rows at once
		bias_grad_f32(dy.data_as<float>(), fdb.data(), outer, db.numel(), inner);
		fdb.store();
		return;
	}
	// The same additions in the same order as over the whole tensor: slice by slice.
	const int64_t slice = db.numel() * inner;
	const int64_t slices = std::max<int64_t>(1, f32_piece_elements / std::max<int64_t>(slice, 1));
	std::vector<float> scratch(dy.dtype() == DType::f32 ? 0 : static_cast<size_t>(std::min(outer, slices) * slice));
	for_each_piece(outer, slices, [&](int64_t first, int64_t count) {
		const F32Piece pdy(dy, first * slice, count * slice, scratch.data(), true);
		bias_grad_f32(pdy.data(), fdb.data(), count, db.numel(), inner);
	});
	fdb.store();
}

void CpuOps::relu_forward(const Tensor& x, const Tensor& y) const
{
	expect_float(x, "relu input");
	expect_same_dtype(x, y, "relu");
	expect_same_numel(x, y, "relu");
	for_each_piece(x.numel(), f32_piece_elements, [&](int64_t start, int64_t count) {
		float sx[f32_piece_elements], sy[f32_piece_elements];
		const F32Piece px(x, start, count, sx, true), py(y, start, count, sy, false);
		const float* xs = px.data();
		float* ys = py.data();
		for (int64_t i = 0; i < count; ++i)
			ys[i] = std::max(xs[i], 0.0f);
		py.store();
	});
}

void CpuOps::relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const
{
	expect_float(y, "relu output");
	expect_same_dtype(y, dy, "relu backward");
	expect_same_dtype(y, dx, "relu backward");
	expect_same_numel(y, dy, "relu backward");
	expect_same_numel(y, dx, "relu backward");
	if (y.dtype() != DType::f32) {
		// 16-bit: dx is dy or zero, so no value needs widening; y > 0 is a test on its bits
		// (sign clear, not zero, at most +inf: NaN is not > 0, as in f32).
		const uint16_t inf = y.dtype() == DType::bf16 ? 0x7f80u : 0x7c00u;
		const uint16_t* __restrict ys = y.data_as<uint16_t>();
		const uint16_t* __restrict g = dy.data_as<uint16_t>();
		uint16_t* __restrict out = dx.data_as<uint16_t>();
		// A mask rather than a select of g[i], so the loop vectorizes.
		for (int64_t i = 0, n = y.numel(); i < n; ++i) {
			const uint16_t below = static_cast<uint16_t>(ys[i] - 1u);
			const uint16_t keep = static_cast<uint16_t>(below < inf ? 0xffffu : 0u);
			out[i] = static_cast<uint16_t>(g[i] & keep);
		}
		return;
	}
	const F32Copy fy(y, true), fdy(dy, true), fdx(dx, false);
	const float* __restrict ys = fy.data();
	const float* __restrict g = fdy.data();
	float* __restrict out = fdx.data();
	const int64_t n = y.numel();
	for (int64_t i = 0; i < n; ++i)
		out[i] = ys[i] > 0.0f ? g[i] : 0.0f;
	fdx.store();
}

void CpuOps::gelu_forward(const Tensor& x, const Tensor& y) const
{
	expect_float(x, "gelu input");
	expect_same_dtype(x, y, "gelu");
	expect_same_numel(x, y, "gelu");
	for_each_piece(x.numel(), f32_piece_elements, [&](int64_t start, int64_t count) {
		float sx[f32_piece_elements], sy[f32_piece_elements];
		const F32Piece px(x, start, count, sx, true), py(y, start, count, sy, false);
		gelu_f32(px.data(), py.data(), count);
		py.store();
	});
}

void CpuOps::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const
{
	expect_float(x, "gelu input");
	expect_same_dtype(x, dy, "gelu backward");
	expect_same_dtype(x, dx, "gelu backward");
	expect_same_numel(x, dy, "gelu backward");
	expect_same_numel(x, dx, "gelu backward");
	for_each_piece(x.numel(), f32_piece_elements, [&](int64_t start, int64_t count) {
		float sx[f32_piece_elements], sdy[f32_piece_elements], sdx[f32_piece_elements];
		const F32Piece px(x, start, count, sx, true), pdy(dy, start, count, sdy, true);
		const F32Piece pdx(dx, start, count, sdx, false);
		gelu_backward_f32(px.data(), pdy.data(), pdx.data(), count);
		pdx.store();
	});
}

void CpuOps::gelu_backward_bias_grad(const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& db,
				     bool accumulate) const
{
	expect_float(x, "gelu input");
	expect_same_dtype(x, dy, "gelu backward");
	expect_same_dtype(x, dx, "gelu backward");
	expect_same_numel(x, dy, "gelu backward");
	expect_same_numel(x, dx, "gelu backward");
	const int64_t outer = checked_bias_outer(dx, db, 1);
	const int64_t channels = db.numel();
	const F32Copy fdb(db, accumulate);
	if (!accumulate)
		std::fill_n(fdb.data(), channels, 0.0f);
	// Row by row, the rows added in order as bias_grad adds them: in f32 the same bits as the two
	// passes, without reading dx back from memory (the MLP's dx is 4 MiB at the default GPT).
	std::vector<float> scratch(x.dtype() == DType::f32 ? 0 : static_cast<size_t>(3 * channels));
	const auto part = [&](int64_t i) { return scratch.empty() ? nullptr : scratch.data() + i * channels; };
	float* __restrict g = fdb.data();
	for (int64_t o = 0; o < outer; ++o) {
		const int64_t start = o * channels;
		const F32Piece px(x, start, channels, part(0), true), pdy(dy, start, channels, part(1), true);
		const F32Piece pdx(dx, start, channels, part(2), false);
		gelu_backward_f32(px.data(), pdy.data(), pdx.data(), channels);
		pdx.store();
		const float* __restrict row = pdx.data();
		for (int64_t c = 0; c < channels; ++c)
			g[c] += row[c];
	}
	fdb.store();
}

void CpuOps::gelu_forward_slope(const Tensor& x, const Tensor& y) const
{
	TOWER_CHECK(x.dtype() == DType::f32 && y.dtype() == DType::f32,
		    "gelu_forward_slope takes f32 tensors (gelu_keeps_slope), got {} and {}", dtype_name(x.dtype()),
		    dtype_name(y.dtype()));
	expect_same_numel(x, y, "gelu");
	TOWER_CHECK(x.data() != y.data(), "gelu_forward_slope: y must not be x, which receives the slope");
	gelu_slope_f32(x.data_as<float>(), y.data_as<float>(), x.data_as<float>(), x.numel());
}

void CpuOps::slope_backward_bias_grad(const Tensor& slope, const Tensor& dy, const Tensor& dx, const Tensor& db,
				      bool accumulate) const
{
	for (const Tensor* t : {&slope, &dy, &dx, &db})
		TOWER_CHECK(t->dtype() == DType::f32, "slope_backward_bias_grad takes f32 tensors (gelu_keeps_slope), got {}",
			    dtype_name(t->dtype()));
	expect_same_numel(slope, dy, "gelu backward");
	expect_same_numel(slope, dx, "gelu backward");
	const int64_t outer = checked_bias_outer(dx, db, 1);
	const int64_t channels = db.numel();
	float* __restrict g = db.data_as<float>();
	if (!accumulate)
		std::fill_n(g, channels, 0.0f);
	// Row by row in order, as gelu_backward_bias_grad adds them: the same bits.
	for (int64_t o = 0; o < outer; ++o) {
		const float* s = slope.data_as<float>() + o * channels; // may be out
		const float* __restrict d = dy.data_as<float>() + o * channels;
		float* out = dx.data_as<float>() + o * channels;
		for (int64_t c = 0; c < channels; ++c) {
			const float v = d[c] * s[c];
			out[c] = v;
			g[c] += v;
		}
	}
}

void CpuOps::cast(const Tensor& src, const Tensor& dst, bool accumulate) const
{
	expect_float(src, "cast source");
	expect_float(dst, "cast destination");
	expect_same_numel(src, dst, "cast");
	if (src.dtype() == DType::f32 && dst.dtype() == DType::f32) {
		const float* in = src.data_as<float>();
		float* out = dst.data_as<float>();
		if (accumulate)
			for (int64_t i = 0, n = src.numel(); i < n; ++i)
				out[i] += in[i];
		else if (out != in)
			std::copy_n(in, src.numel(), out);
		return;
	}
	// Chunks small enough for the stack: a cast runs every step (working copies of the weights,
	// 16-bit gradients into f32), and a temporary as large as the tensor would cost an
	// allocation and page faults each time.
	constexpr int64_t chunk = 2048;
	float in[chunk], out[chunk];
	const bool src_f32 = src.dtype() == DType::f32, dst_f32 = dst.dtype() == DType::f32;
	const int64_t n = src.numel();
	for (int64_t start = 0; start < n; start += chunk) {
		const int64_t len = std::min(chunk, n - start);
		if (!accumulate) {
			// One conversion straight from src into dst where either side is f32.
			if (dst_f32) {
				widen_range(src, start, len, dst.data_as<float>() + start);
			} else if (src_f32) {
				narrow_range(src.data_as<float>() + start, dst, start, len);
			} else {
				widen_range(src, start, len, in);
				narrow_range(in, dst, start, len);
			}
			continue;
		}
		const float* a = src_f32 ? src.data_as<float>() + start : in;
		float* d = dst_f32 ? dst.data_as<float>() + start : out;
		if (!src_f32)
			widen_range(src, start, len, in);
		if (!dst_f32)
			widen_range(dst, start, len, out);
		for (int64_t i = 0; i < len; ++i)
			d[i] += a[i];
		if (!dst_f32)
			narrow_range(d, dst, start, len);
	}
}

} // namespace tower
