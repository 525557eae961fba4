// Tests of the CPU ops backend against float64 references, and of its error reporting.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "models/kernels/cpu/cpu_threads.h"
#include "models/kernels/cpu/dnnl_cpu.h"
#include "models/init.h"
#include "models/layers/workspace.h"
#include "models/kernels/ops.h"
#include "base/error.h"
#include "test/harness/mpi_main.h"
#include "test/models/reference.h"
#include "tower_config.h"

using namespace tower;
using namespace tower::test;

namespace {

Tensor random_tensor(const Shape& shape, const char* name)
{
	return Tensor::from_host(seeded_uniform(name, 1, shape_numel(shape), 1.0f), shape, Device{});
}

// Each row's softmax in float64.
Vec ref_softmax(const Vec& z, int64_t rows, int64_t k)
{
	Vec p(z.size());
	for (int64_t b = 0; b < rows; ++b) {
		const double top = *std::max_element(z.begin() + b * k, z.begin() + (b + 1) * k);
		double sum = 0;
		for (int64_t j = 0; j < k; ++j)
			sum += std::exp(z[b * k + j] - top);
		for (int64_t j = 0; j < k; ++j)
			p[b * k + j] = std::exp(z[b * k + j] - top) / sum;
	}
	return p;
}

double at(const Vec& m, int64_t cols, int64_t r, int64_t c, bool transposed)
{
	return transposed ? m[c * cols + r] : m[r * cols + c];
}

} // namespace

TEST_CASE("gemm handles every transpose combination with alpha and beta")
{
	const Ops& ops = ops_for(Device{});
	const int64_t m = 5, n = 4, k = 3;
	for (bool ta : {false, true})
		for (bool tb : {false, true}) {
			const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, "a");
			const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, "b");
			const Tensor c = random_tensor({m, n}, "c");
			const Vec av = to_double(a.to_host_f32()), bv = to_double(b.to_host_f32()), c0 = to_double(c.to_host_f32());
			ops.gemm(ta ? Transpose::yes : Transpose::no, tb ? Transpose::yes : Transpose::no, 0.5f, a, b, 2.0f, c);
			const std::vector<float> got = c.to_host_f32();
			for (int64_t i = 0; i < m; ++i)
				for (int64_t j = 0; j < n; ++j) {
					double s = 0;
					for (int64_t l = 0; l < k; ++l)
						s += at(av, a.dim(1), i, l, ta) * at(bv, b.dim(1), l, j, tb);
					CHECK(got[i * n + j] == doctest::Approx(0.5 * s + 2.0 * c0[i * n + j]).epsilon(1e-5));
				}
		}
}

// Rows of B 512 floats (2 KiB) apart: below AVX-512 (ops-avx2 runs this on every machine) the CPU
// backend copies such a B into rows one cache line further apart before oneDNN reads it.
TEST_CASE("gemm with B's rows a multiple of 512 bytes apart matches float64, in f32, bf16 and into f32")
{
	const Ops& ops = ops_for(Device{});
	const int64_t k = 24, n = 512;
	for (int64_t m : {8, 40, 256})
		for (DType type : {DType::f32, DType::bf16})
			for (bool into_f32 : {false, true}) {
				if (into_f32 && type != DType::bf16)
					continue;
				CAPTURE(m);
				CAPTURE(dtype_name(type));
				CAPTURE(into_f32);
				auto make = [&](const Shape& shape, const char* name) {
					Tensor t = Tensor::empty(shape, type, Device{});
					ops.cast(random_tensor(shape, name), t, false);
					return t;
				};
				const Tensor a = make({m, k}, "a"), b = make({k, n}, "b");
				const Tensor c = into_f32 ? random_tensor({m, n}, "c") : make({m, n}, "c");
				const Vec av = to_double(a.to_host_f32()), bv = to_double(b.to_host_f32());
				const Vec c0 = to_double(c.to_host_f32());
				if (into_f32)
					REQUIRE(ops.gemm_into_f32(Transpose::no, Transpose::no, 0.5f, a, b, 2.0f, c));
				else
					ops.gemm(Transpose::no, Transpose::no, 0.5f, a, b, 2.0f, c);
				// f32 accumulation; a bf16 result is rounded once, to 2^-8 of itself.
				const double rounding = type == DType::bf16 && !into_f32 ? 1.0 / 256 : 0.0;
				const std::vector<float> got = c.to_host_f32();
				for (int64_t i = 0; i < m; ++i)
					for (int64_t j = 0; j < n; ++j) {
						double s = 2.0 * c0[i * n + j], magnitude = std::abs(s);
						for (int64_t l = 0; l < k; ++l) {
							const double term = 0.5 * av[i * k + l] * bv[l * n + j];
							s += term;
							magnitude += std::abs(term);
						}
						CAPTURE(i);
						CAPTURE(j);
						REQUIRE(std::abs(got[i * n + j] - s) <= 1e-5 * magnitude + rounding * std::abs(s));
					}
			}
}

TEST_CASE("gemm names the shapes that do not fit and refuses operands of mixed types")
{
	const Ops& ops = ops_for(Device{});
	const Tensor a = Tensor::zeros({2, 3}, DType::f32, Device{});
	const Tensor c = Tensor::zeros({2, 2}, DType::f32, Device{});
	CHECK_THROWS_WITH_AS(ops.gemm(Transpose::no, Transpose::no, 1, a, a, 0, c), doctest::Contains("do not fit"), Error);
	const Tensor i = Tensor::zeros({3, 2}, DType::i32, Device{});
	CHECK_THROWS_WITH_AS(ops.gemm(Transpose::no, Transpose::no, 1, a, i, 0, c), doctest::Contains("must share one type"), Error);
}

TEST_CASE("bias with ReLU, bias gradient (accumulating), fill and accumulate")
{
	const Ops& ops = ops_for(Device{});
	const int64_t outer = 3, channels = 4, inner = 5;
	const Tensor y = random_tensor({outer, channels, inner}, "y");
	const Tensor bias = random_tensor({channels}, "bias");
	const Vec y0 = to_double(y.to_host_f32()), bv = to_double(bias.to_host_f32());
	ops.bias_act(y, bias, inner, true);
	const std::vector<float> got = y.to_host_f32();
	for (int64_t i = 0; i < y.numel(); ++i)
		CHECK(got[i] == doctest::Approx(std::max(0.0, y0[i] + bv[(i / inner) % channels])));

	const Tensor db = Tensor::zeros({channels}, DType::f32, Device{});
	ops.fill(db, 1.5f);
	ops.bias_grad(y, db, inner, true);
	const std::vector<float> g = db.to_host_f32();
	for (int64_t c = 0; c < channels; ++c) {
		double s = 1.5;
		for (int64_t o = 0; o < outer; ++o)
			for (int64_t i = 0; i < inner; ++i)
				s += got[(o * channels + c) * inner + i];
		CHECK(g[c] == doctest::Approx(s).epsilon(1e-5));
	}
	ops.accumulate(-2.0f, db, db);
	CHECK(db.to_host_f32()[0] == doctest::Approx(-g[0]));
}

// A Linear layer's bias gradient in f32 adds each column's rows in order, 64 columns at a time in
// registers and the rest one by one: the same bits as the plain sum, overwriting and adding, at
// widths with and without a tail.
TEST_CASE("the f32 bias gradient of rows is each column's rows added in order, to the bit")
{
	const Ops& ops = ops_for(Device{});
	for (const int64_t channels : {40, 64, 136, 768})
		for (bool add : {false, true}) {
			CAPTURE(channels);
			CAPTURE(add);
			const int64_t rows = 37;
			const std::vector<float> dy = seeded_uniform("rows", static_cast<uint64_t>(channels), rows * channels, 3.0f);
			const std::vector<float> start = seeded_uniform("start", 1, channels, 1.0f);
			const Tensor db = Tensor::from_host(start, {channels}, Device{});
			ops.bias_grad(Tensor::from_host(dy, {rows, channels}, Device{}), db, 1, add);
			std::vector<float> want(static_cast<size_t>(channels));
			for (int64_t c = 0; c < channels; ++c) {
				float s = add ? start[c] : 0.0f;
				for (int64_t r = 0; r < rows; ++r)
					s += dy[r * channels + c];
				want[c] = s;
			}
			CHECK(db.to_host_f32() == want);
		}
}

// The product with its bias against its two parts (the default, Ops::gemm_bias_act): the same bits
// in f32; in 16 bits within one rounding of float64 (the parts round twice). n = 512 with few
// rows is the shape whose B the CPU copies below AVX-512 (ops-avx2).
TEST_CASE("gemm_bias_act is gemm then bias and ReLU: the same bits in f32, one rounding in 16 bits")
{
	const Ops& ops = ops_for(Device{});
	for (DType t : {DType::f32, DType::bf16, DType::f16})
		for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{7, 5, 3}, {16, 512, 24}, {64, 96, 130}})
			for (bool relu : {false, true}) {
				CAPTURE(dtype_name(t));
				CAPTURE(n);
				CAPTURE(relu);
				const auto make = [&](const Shape& shape, const char* name) {
					const Tensor f = random_tensor(shape, name);
					Tensor out = Tensor::empty(shape, t, Device{});
					ops.cast(f, out, false);
					return out;
				};
				const Tensor x = make({m, k}, "x"), w = make({n, k}, "w"), bias = make({n}, "bias");
				const Tensor fused = Tensor::empty({m, n}, t, Device{}), parts = Tensor::empty({m, n}, t, Device{});
				ops.gemm_bias_act(Transpose::no, Transpose::yes, x, w, bias, relu, fused);
				ops.Ops::gemm_bias_act(Transpose::no, Transpose::yes, x, w, bias, relu, parts);
				const std::vector<float> got = fused.to_host_f32(), two = parts.to_host_f32();
				const Vec xv = to_double(x.to_host_f32()), wv = to_double(w.to_host_f32()), bv = to_double(bias.to_host_f32());
				const double unit = t == DType::f32 ? 0.0 : t == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
				int wrong = 0;
				for (int64_t i = 0; i < m; ++i)
					for (int64_t j = 0; j < n; ++j) {
						double s = bv[j];
						for (int64_t l = 0; l < k; ++l)
							s += xv[i * k + l] * wv[j * k + l];
						const double want = relu ? std::max(s, 0.0) : s;
						const float g = got[i * n + j];
						if (t == DType::f32 ? g != two[i * n + j]
								    : std::abs(g - want) > unit * std::abs(want) + 1e-5 * k)
							++wrong;
					}
				CHECK(wrong == 0);
			}
	// A NaN input stays NaN through the ReLU (a max instruction would make it 0 and hide it).
	const Tensor a = random_tensor({4, 3}, "a"), w = random_tensor({5, 3}, "w"), c = random_tensor({4, 5}, "c");
	a.data_as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
	ops.gemm_bias_act(Transpose::no, Transpose::yes, a, w, random_tensor({5}, "b"), true, c);
	const std::vector<float> row = c.to_host_f32();
	CHECK(std::all_of(row.begin(), row.begin() + 5, [](float v) { return std::isnan(v); }));
	CHECK(std::none_of(row.begin() + 5, row.end(), [](float v) { return std::isnan(v); }));
	CHECK_THROWS_WITH_AS(ops.gemm_bias_act(Transpose::no, Transpose::yes, a, w, random_tensor({4}, "b"), false, c),
			     doctest::Contains("gemm bias: f32 [4] for a product of 5 f32 columns"), Error);
}

// GELU's slope and the bias gradient in one pass, against the two passes: the same bits in f32
// (rows added in the same order); in 16 bits db sums dx before its rounding, so within float64's
// sum of the rounded dx by a rounding per row, and db's own.
TEST_CASE("gelu_backward_bias_grad is gelu_backward then bias_grad, overwriting and adding")
{
	const Ops& ops = ops_for(Device{});
	const int64_t rows = 9, channels = 40;
	for (DType t : {DType::f32, DType::bf16})
		for (bool add : {false, true}) {
			CAPTURE(dtype_name(t));
			CAPTURE(add);
			const auto make = [&](const char* name, float scale) {
				Tensor out = Tensor::empty({rows, channels}, t, Device{});
				const Tensor f = random_tensor({rows, channels}, name);
				ops.cast(f, out, false);
				ops.accumulate(scale - 1.0f, out, out);
				return out;
			};
			const Tensor x = make("x", 3.0f), dy = make("dy", 1.0f);
			const Tensor dx = Tensor::empty({rows, channels}, t, Device{}), dx2 = Tensor::empty({rows, channels}, t, Device{});
			const auto start_db = [&] {
				Tensor out = Tensor::empty({channels}, t, Device{});
				ops.cast(random_tensor({channels}, "db"), out, false);
				return out;
			};
			const Tensor db = start_db(), db2 = start_db();
			ops.gelu_backward_bias_grad(x, dy, dx, db, add);
			ops.Ops::gelu_backward_bias_grad(x, dy, dx2, db2, add);
			CHECK(dx.to_host_f32() == dx2.to_host_f32());
			const std::vector<float> g = db.to_host_f32(), g2 = db2.to_host_f32();
			if (t == DType::f32) {
				CHECK(g == g2);
				continue;
			}
			const std::vector<float> d = dx.to_host_f32(), start = start_db().to_host_f32();
			for (int64_t c = 0; c < channels; ++c) {
				double s = add ? start[c] : 0.0, size = 0.0;
				for (int64_t r = 0; r < rows; ++r) {
					s += d[r * channels + c];
					size += std::abs(d[r * channels + c]);
				}
				CHECK(std::abs(g[c] - s) <= (size + std::abs(s)) / 256 + 1e-6); // and db's own rounding
			}
		}
}

TEST_CASE("the bias gradient of long rows (a convolution's) matches float64, overwriting and adding")
{
	const Ops& ops = ops_for(Device{});
	const int64_t outer = 3, channels = 2;
	for (int64_t inner : {int64_t{16}, int64_t{53}, int64_t{784}})
		for (bool add : {false, true}) {
			CAPTURE(inner);
			CAPTURE(add);
			const Tensor dy = random_tensor({outer, channels, inner}, "dy");
			const Tensor db = random_tensor({channels}, "db");
			const Vec d = to_double(dy.to_host_f32()), start = to_double(db.to_host_f32());
			ops.bias_grad(dy, db, inner, add);
			const std::vector<float> g = db.to_host_f32();
			for (int64_t c = 0; c < channels; ++c) {
				double s = add ? start[c] : 0.0;
				for (int64_t o = 0; o < outer; ++o)
					for (int64_t i = 0; i < inner; ++i)
						s += d[(o * channels + c) * inner + i];
				CHECK(g[c] == doctest::Approx(s).epsilon(1e-5).scale(1e-3));
			}
		}
}

TEST_CASE("col2im is the adjoint of im2col, with and without padding")
{
	const Ops& ops = ops_for(Device{});
	for (int64_t pad : {0, 1, 2}) {
		const ConvGeometry g{2, 5, 6, 3, pad};
		const Tensor image = random_tensor({g.channels, g.height, g.width}, "image");
		const Tensor col = Tensor::zeros({g.col_rows(), g.col_cols()}, DType::f32, Device{});
		ops.im2col(g, image, col);
		// <im2col(x), c> == <x, col2im(c)> for any x and c.
		const Tensor c = random_tensor(col.shape(), "c");
		const Tensor back = Tensor::zeros(image.shape(), DType::f32, Device{});
		ops.col2im(g, c, back);
		const Vec xc = to_double(col.to_host_f32()), cv = to_double(c.to_host_f32());
		const Vec xv = to_double(image.to_host_f32()), bv = to_double(back.to_host_f32());
		double lhs = 0, rhs = 0;
		for (size_t i = 0; i < xc.size(); ++i)
			lhs += xc[i] * cv[i];
		for (size_t i = 0; i < xv.size(); ++i)
			rhs += xv[i] * bv[i];
		CHECK(lhs == doctest::Approx(rhs).epsilon(1e-5));
		// The centre tap of the kernel sees the image itself (with padding 1).
		if (pad == 1) {
			const std::vector<float> cols = col.to_host_f32();
			const int64_t centre_row = 1 * g.kernel + 1; // channel 0, ky = 1, kx = 1
			for (int64_t i = 0; i < g.height * g.width; ++i)
				CHECK(cols[centre_row * g.col_cols() + i] == image.to_host_f32()[i]);
		}
	}
}

TEST_CASE("im2col and col2im of several images are those of each image, side by side")
{
	const Ops& ops = ops_for(Device{});
	const ConvGeometry g{2, 5, 6, 3, 1};
	const int64_t n = 3, pixels = g.col_cols();
	const Tensor images = random_tensor({n, g.channels, g.height, g.width}, "images");
	const Tensor col = Tensor::zeros({g.col_rows(), n * pixels}, DType::f32, Device{});
	ops.im2col(g, images, col);
	const Tensor c = random_tensor(col.shape(), "c");
	const Tensor back = Tensor::zeros(images.shape(), DType::f32, Device{});
	ops.col2im(g, c, back);
	const std::vector<float> all = col.to_host_f32(), cv = c.to_host_f32(), all_back = back.to_host_f32();
	const int64_t plane = g.channels * g.height * g.width;
	for (int64_t i = 0; i < n; ++i) {
		const Tensor one = Tensor::zeros({g.col_rows(), pixels}, DType::f32, Device{});
		ops.im2col(g, images.select(i), one);
		const std::vector<float> ov = one.to_host_f32();
		std::vector<float> mine(static_cast<size_t>(g.col_rows() * pixels));
		size_t wrong = 0;
		for (int64_t r = 0; r < g.col_rows(); ++r)
			for (int64_t p = 0; p < pixels; ++p) {
				wrong += all[static_cast<size_t>(r * n * pixels + i * pixels + p)] != ov[static_cast<size_t>(r * pixels + p)];
				mine[static_cast<size_t>(r * pixels + p)] = cv[static_cast<size_t>(r * n * pixels + i * pixels + p)];
			}
		CHECK_MESSAGE(wrong == 0, "im2col of image ", i);
		const Tensor one_back = Tensor::zeros({g.channels, g.height, g.width}, DType::f32, Device{});
		ops.col2im(g, Tensor::from_host(mine, {g.col_rows(), pixels}, Device{}), one_back);
		const std::vector<float> ob = one_back.to_host_f32();
		CHECK_MESSAGE(std::equal(ob.begin(), ob.end(), all_back.begin() + i * plane), "col2im of image ", i);
	}
	CHECK_THROWS_WITH_AS(ops.im2col(g, images, Tensor::zeros({g.col_rows(), pixels}, DType::f32, Device{})),
			     doctest::Contains("for 3 images"), tower::Error);
}

TEST_CASE("the convolution's workspace holds what fits in 128 MiB, at least one image, at most the batch")
{
	const ConvGeometry cnn_second{32, 14, 14, 5, 2}; // 800 column rows, 196 pixels
	const int64_t per_image = conv_workspace_per_image(cnn_second, 64);
	CHECK(per_image == (800 + 64) * 196);
	CHECK(conv_workspace_elements(cnn_second, 64, 256, 4) == 198 * per_image); // 128 MiB / 677,376 bytes
	CHECK(conv_workspace_elements(cnn_second, 64, 256, 2) == 256 * per_image);
	CHECK(conv_workspace_elements(cnn_second, 64, 3, 4) == 3 * per_image);
	const ConvGeometry huge{512, 256, 256, 7, 3};
	CHECK(conv_workspace_elements(huge, 512, 8, 4) == conv_workspace_per_image(huge, 512));
	const Ops& ops = cpu_ops();
	const Tensor x = Tensor::zeros({2, 32, 14, 14}, DType::f32, Device{});
	const Tensor w = Tensor::zeros({64, 32, 5, 5}, DType::f32, Device{});
	const Tensor y = Tensor::zeros({2, 64, 14, 14}, DType::f32, Device{});
	CHECK_THROWS_WITH_AS(ops.Ops::conv2d_forward(cnn_second, x, w, y, Tensor::zeros({per_image - 1}, DType::f32, Device{})),
			     doctest::Contains("one image needs"), tower::Error);
}

TEST_CASE("gemm_into_f32 writes bf16 products into f32 unrounded, and declines other types")
{
	const Ops& ops = cpu_ops();
	const int64_t m = 7, n = 6, k = 33;
	auto bf16 = [&](const Shape& shape, const char* name) {
		Tensor out = Tensor::empty(shape, DType::bf16, Device{});
		ops.cast(random_tensor(shape, name), out, false);
		return out;
	};
	const Tensor c_start = random_tensor({m, n}, "c");
	// Native kernels where oneDNN runs AVX512_BF16 or AMX code, widened operands elsewhere (the
	// ops-avx2 test runs this on every machine): f32 results either way.
	const std::string isa = onednn_isa();
	CAPTURE(isa);
	for (bool ta : {false, true})
		for (bool tb : {false, true})
			for (float beta : {0.0f, 1.0f}) {
				CAPTURE(ta);
				CAPTURE(tb);
				CAPTURE(beta);
				const Tensor a = bf16(ta ? Shape{k, m} : Shape{m, k}, "a");
				const Tensor b = bf16(tb ? Shape{n, k} : Shape{k, n}, "b");
				Tensor c = Tensor::empty({m, n}, DType::f32, Device{});
				c.copy_from(c_start);
				const bool done = ops.gemm_into_f32(ta ? Transpose::yes : Transpose::no,
								    tb ? Transpose::yes : Transpose::no, 1.0f, a, b, beta, c);
				REQUIRE(done);
				const Vec av = to_double(a.to_host_f32()), bv = to_double(b.to_host_f32());
				const Vec c0 = to_double(c_start.to_host_f32());
				const std::vector<float> got = c.to_host_f32();
				for (int64_t i = 0; i < m; ++i)
					for (int64_t j = 0; j < n; ++j) {
						double s = beta * c0[i * n + j], magnitude = std::abs(s);
						for (int64_t l = 0; l < k; ++l) {
							const double term = at(av, a.dim(1), i, l, ta) * at(bv, b.dim(1), l, j, tb);
							s += term;
							magnitude += std::abs(term);
						}
						// f32 accumulation, in any order, is within k * 2^-24 of the terms' sum of
						// magnitudes (2e-6 here); a result rounded to bf16 on the way is off by up to
						// 2^-9 of itself.
						CAPTURE(s);
						CHECK(std::abs(got[i * n + j] - s) <= 1e-5 * magnitude);
					}
			}
	// f32 and f16 operands are not its business: f16 must still overflow to inf in 16 bits.
	const Tensor c = Tensor::zeros({m, n}, DType::f32, Device{});
	for (DType t : {DType::f32, DType::f16}) {
		const Tensor a = Tensor::zeros({m, k}, t, Device{}), b = Tensor::zeros({k, n}, t, Device{});
		CHECK_FALSE(ops.gemm_into_f32(Transpose::no, Transpose::no, 1.0f, a, b, 0.0f, c));
	}
}

// The CPU backend's own convolution against the backend-neutral im2col + gemm path of Ops (the
// CUDA backend's), which the grad checks and the float64 references validate, in f32 and bf16,
// overwriting and adding, with workspaces for one pass over the batch and for several.
TEST_CASE("the CPU convolution matches im2col + gemm forward and backward, in f32 and bf16")
{
	const Ops& ops = cpu_ops();
	CHECK_FALSE(ops.conv_uses_columns());
	const ConvGeometry g{3, 7, 6, 3, 1};
	const int64_t batch = 3, oc = 4;
	for (DType t : {DType::f32, DType::bf16})
	for (int64_t per_pass : {int64_t{1}, int64_t{2}, batch}) {
		CAPTURE(per_pass);
		auto typed = [&](const Shape& shape, const char* name) {
			Tensor out = Tensor::empty(shape, t, Device{});
			ops.cast(random_tensor(shape, name), out, false);
			return out;
		};
		const Tensor x = typed({batch, g.channels, g.height, g.width}, "x");
		const Tensor w = typed({oc, g.channels, g.kernel, g.kernel}, "w");
		const Tensor dy = typed({batch, oc, g.out_height(), g.out_width()}, "dy");
		const Tensor col = Tensor::empty({per_pass * conv_workspace_per_image(g, oc)}, t, Device{});
		const double tol = t == DType::f32 ? 1e-5 : 1e-2;
		auto same = [&](const Tensor& got, const Tensor& want, const std::string& what) {
			const std::vector<float> a = got.to_host_f32(), b = want.to_host_f32();
			size_t wrong = 0;
			for (size_t i = 0; i < a.size(); ++i)
				wrong += a[i] == doctest::Approx(b[i]).epsilon(tol).scale(1.0) ? 0 : 1;
			CHECK_MESSAGE(wrong == 0, what, " (", dtype_name(t), "): ", wrong, " of ", a.size(), " differ");
		};
		const Tensor y = Tensor::zeros(dy.shape(), t, Device{}), y_ref = Tensor::zeros(dy.shape(), t, Device{});
		ops.conv2d_forward(g, x, w, y, Tensor());
		ops.Ops::conv2d_forward(g, x, w, y_ref, col);
		same(y, y_ref, "forward");
		const Tensor dx = Tensor::zeros(x.shape(), t, Device{}), dx_ref = Tensor::zeros(x.shape(), t, Device{});
		ops.conv2d_backward_data(g, w, dy, dx, Tensor());
		ops.Ops::conv2d_backward_data(g, w, dy, dx_ref, col);
		same(dx, dx_ref, "input gradient");
		for (bool add : {false, true}) {
			const Tensor dw = typed(w.shape(), "dw0"), dw_ref = typed(w.shape(), "dw0");
			ops.conv2d_backward_weights(g, x, dy, dw, add, Tensor());
			ops.Ops::conv2d_backward_weights(g, x, dy, dw_ref, add, col);
			same(dw, dw_ref, add ? "weight gradient, added" : "weight gradient");
		}
	}
}

TEST_CASE("the im2col weight gradient of a large 16-bit batch is rounded once, not once per image")
{
	// The default convolution (the CUDA backend's) once summed one image at a time into a bf16
	// buffer, and that sum lost each term once it was ~2^8 times larger. The f32 sum of the same bf16 inputs is
	// the reference: the bf16 result must be within a rounding or two of it.
	const Ops& ops = cpu_ops();
	const ConvGeometry g{2, 6, 6, 3, 1};
	const int64_t batch = 256, oc = 3;
	auto make = [&](const Shape& shape, const char* name, DType t) {
		Tensor out = Tensor::empty(shape, t, Device{});
		// Positive terms, so the sum grows with the batch and the rounding of a 16-bit running sum shows.
		std::vector<float> v = random_tensor(shape, name).to_host_f32();
		for (float& e : v)
			e = 0.5f + std::abs(e);
		ops.cast(Tensor::from_host(v, shape, Device{}), out, false);
		return out;
	};
	const Tensor x16 = make({batch, g.channels, g.height, g.width}, "x", DType::bf16);
	const Tensor dy16 = make({batch, oc, g.out_height(), g.out_width()}, "dy", DType::bf16);
	const Tensor x32 = Tensor::empty(x16.shape(), DType::f32, Device{}), dy32 = Tensor::empty(dy16.shape(), DType::f32, Device{});
	ops.cast(x16, x32, false);
	ops.cast(dy16, dy32, false);
	const Shape w_shape = {oc, g.channels, g.kernel, g.kernel};
	const Tensor want = Tensor::zeros(w_shape, DType::f32, Device{}), got = Tensor::zeros(w_shape, DType::bf16, Device{});
	const auto workspace = [&](int64_t images, DType t) {
		return Tensor::empty({images * conv_workspace_per_image(g, oc)}, t, Device{});
	};
	ops.Ops::conv2d_backward_weights(g, x32, dy32, want, false, workspace(batch, DType::f32));
	// One pass over the batch, and passes of 100 images and of one summed in f32 (a bf16 running
	// sum of 256 passes would be as far off as the image-by-image sum was).
	for (int64_t per_pass : {batch, int64_t{100}, int64_t{1}}) {
		CAPTURE(per_pass);
		ops.Ops::conv2d_backward_weights(g, x16, dy16, got, false, workspace(per_pass, DType::bf16));
		const std::vector<float> a = got.to_host_f32(), b = want.to_host_f32();
		double worst = 0;
		for (size_t i = 0; i < a.size(); ++i)
			worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::abs(static_cast<double>(b[i])));
		CAPTURE(worst);
		CHECK(worst <= 2.0 / 256); // two bf16 roundings (2^-8 each, relative)
	}
}

TEST_CASE("the CPU backend makes each oneDNN primitive once per shape and reuses it")
{
	const Ops& ops = cpu_ops();
	const Tensor a = random_tensor({6, 5}, "a"), b = random_tensor({5, 4}, "b");
	const Tensor c = Tensor::zeros({6, 4}, DType::f32, Device{});
	ops.gemm(Transpose::no, Transpose::no, 1.0f, a, b, 0.0f, c);
	const int64_t made = dnnl_primitives_made();
	for (int i = 0; i < 3; ++i)
		ops.gemm(Transpose::no, Transpose::no, 1.0f, a, b, 0.0f, c);
	CHECK(dnnl_primitives_made() == made);
	// Another shape is another primitive.
	const Tensor c2 = Tensor::zeros({6, 6}, DType::f32, Device{});
	ops.gemm(Transpose::no, Transpose::yes, 1.0f, a, a, 0.0f, c2);
	CHECK(dnnl_primitives_made() == made + 1);
}

TEST_CASE("max pooling picks the first of equal maxima and routes gradients to it")
{
	const Ops& ops = ops_for(Device{});
	// One 2x4 plane: windows {1, 5, 1, 5} (tie) and {2, 3, 0, 9}.
	const Tensor x = Tensor::from_host({1, 5, 2, 3, 1, 5, 0, 9}, {1, 1, 2, 4}, Device{});
	const Tensor y = Tensor::zeros({1, 1, 1, 2}, DType::f32, Device{});
	const Tensor idx = Tensor::zeros({1, 1, 1, 2}, DType::i32, Device{});
	ops.maxpool_forward(x, y, idx);
	CHECK(y.to_host_f32() == std::vector<float>{5, 9});
	CHECK(idx.data_as<int32_t>()[0] == 1);
	CHECK(idx.data_as<int32_t>()[1] == 7);
	const Tensor dy = Tensor::from_host({10, 20}, {1, 1, 1, 2}, Device{});
	const Tensor dx = Tensor::from_host(std::vector<float>(8, 7.0f), {1, 1, 2, 4}, Device{});
	ops.maxpool_backward(dy, idx, dx);
	CHECK(dx.to_host_f32() == std::vector<float>{0, 10, 0, 0, 0, 0, 0, 20});
}

TEST_CASE("softmax cross-entropy: loss, correct count and gradient against float64")
{
	const Ops& ops = ops_for(Device{});
	const int64_t rows = 4, k = 3;
	const Tensor logits = Tensor::from_host({1, 2, 3, 50, -50, 0, 0, 0, 0.5f, -1, 2, 1}, {rows, k}, Device{});
	const std::vector<int32_t> labels = {2, 1, 2, 0};
	Tensor lt = Tensor::empty({rows}, DType::i32, Device{});
	std::copy(labels.begin(), labels.end(), lt.data_as<int32_t>());
	const Tensor probs = Tensor::zeros({rows, k}, DType::f32, Device{});
	const XentResult r = ops.softmax_xent_forward(logits, lt, probs);
	const Vec z = to_double(logits.to_host_f32());
	CHECK(r.loss == doctest::Approx(ref_xent(z, labels, k)).epsilon(1e-5));
	CHECK(r.correct == 2); // rows 0 and 2
	const Tensor d = Tensor::zeros({rows, k}, DType::f32, Device{});
	ops.softmax_xent_backward(probs, lt, d, 1.0f);
	const std::vector<float> dv = d.to_host_f32();
	const Vec p = ref_softmax(z, rows, k);
	for (int64_t b = 0; b < rows; ++b)
		for (int64_t j = 0; j < k; ++j) {
			const double want = (p[b * k + j] - (labels[b] == j ? 1 : 0)) / rows;
			CHECK(dv[b * k + j] == doctest::Approx(want).epsilon(1e-5));
		}
	lt.data_as<int32_t>()[3] = 3;
	CHECK_THROWS_WITH_AS(ops.softmax_xent_forward(logits, lt, probs), doctest::Contains("label 3 of sample 3"), Error);
}

TEST_CASE("softmax cross-entropy on wide rows: vectors and their tails, ties, and a NaN logit")
{
	const Ops& ops = ops_for(Device{});
	for (const int64_t k : {17, 256, 301}) {
		CAPTURE(k);
		const int64_t rows = 5;
		std::vector<float> z = seeded_uniform("xent", static_cast<uint64_t>(k), rows * k, 20.0f);
		z[1 * k + k - 1] = z[1 * k + 3] = 40.0f; // a tie: the first of the two is the prediction
		z[2 * k + 1] = -std::numeric_limits<float>::infinity(); // not row 2's label
		const int64_t last_vector_lane = k / 16 * 16 - 1, tail = k - 1;
		z[0 * k + last_vector_lane] = 30.0f; // unique maxima in the last whole vector and in the tail
		z[3 * k + tail] = 30.0f;
		std::vector<int32_t> labels(rows);
		for (int64_t b = 0; b < rows; ++b)
			labels[b] = static_cast<int32_t>((b * 7 + 3) % k);
		labels[0] = static_cast<int32_t>(last_vector_lane);
		labels[1] = 3;
		labels[3] = static_cast<int32_t>(tail);
		Tensor lt = Tensor::empty({rows}, DType::i32, Device{});
		std::copy(labels.begin(), labels.end(), lt.data_as<int32_t>());
		const Tensor logits = Tensor::from_host(z, {rows, k}, Device{});
		const Tensor probs = Tensor::zeros({rows, k}, DType::f32, Device{});
		const XentResult r = ops.softmax_xent_forward(logits, lt, probs);
		const Vec zd = to_double(z);
		CHECK(r.loss == doctest::Approx(ref_xent(zd, labels, k)).epsilon(1e-5));
		int64_t correct = 0;
		for (int64_t b = 0; b < rows; ++b)
			correct += std::max_element(z.begin() + b * k, z.begin() + (b + 1) * k) - (z.begin() + b * k) == labels[b];
		CHECK(r.correct == correct);
		CHECK(correct >= 3); // rows 0, 1 and 3
		const std::vector<float> p = probs.to_host_f32();
		const Vec want = ref_softmax(zd, rows, k);
		for (size_t i = 0; i < p.size(); ++i)
			CHECK(p[i] == doctest::Approx(want[i]).epsilon(1e-5).scale(1e-30));
		// -inf's probability: e^-87.3 / sum (the exp's clamp), not quite 0.
		CHECK(p[2 * k + 1] >= 0.0f);
		CHECK(p[2 * k + 1] <= 1.2e-38f);
		for (const int64_t at : {int64_t{0}, k / 2, k - 1}) { // a NaN first, inside, in the tail
			std::vector<float> bad_row = z;
			bad_row[4 * k + at] = std::numeric_limits<float>::quiet_NaN();
			const XentResult bad = ops.softmax_xent_forward(Tensor::from_host(bad_row, {rows, k}, Device{}), lt, probs);
			CHECK(std::isnan(bad.loss));
		}
	}
}

TEST_CASE("the CUDA backend is a clear error in a CPU-only build")
{
	if (TOWER_HAVE_CUDA)
		return; // covered by the GPU tests
	CHECK_THROWS_WITH_AS(ops_for(Device{DeviceKind::cuda, 0}), doctest::Contains("CPU-only"), Error);
}

TEST_CASE("a workspace reuses its memory for smaller and equal shapes")
{
	Workspace ws;
	const void* first = ws.get({8, 3}, DType::f32, Device{}).data();
	CHECK(ws.get({4, 3}, DType::f32, Device{}).data() == first);
	CHECK(ws.get({8, 3}, DType::f32, Device{}).data() == first);
	CHECK(ws.get({4, 3}, DType::f32, Device{}).shape() == Shape{4, 3});
	CHECK(ws.get({9, 3}, DType::f32, Device{}).numel() == 27);
}
