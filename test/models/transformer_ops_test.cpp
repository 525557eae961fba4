// The transformer's CPU ops against float64 references: batched and strided GEMMs, LayerNorm and its gradients,
// GELU, the causal softmax and its gradient, head permutes, windows and embeddings, and their errors.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "base/error.h"
#include "models/init.h"
#include "models/kernels/ops.h"
#include "test/harness/mpi_main.h"

using namespace tower;

namespace {

using Vec = std::vector<double>;

Tensor random_tensor(const Shape& shape, const char* name, float bound = 1.0f)
{
	return Tensor::from_host(seeded_uniform(name, 2, shape_numel(shape), bound), shape, Device{});
}

Vec values(const Tensor& t)
{
	const std::vector<float> f = t.to_host_f32();
	return {f.begin(), f.end()};
}

void check_near(const Tensor& got, const Vec& want, double tol, const char* what)
{
	const Vec g = values(got);
	REQUIRE(g.size() == want.size());
	double worst = 0;
	for (size_t i = 0; i < g.size(); ++i)
		worst = std::max(worst, std::abs(g[i] - want[i]) / std::max(1.0, std::abs(want[i])));
	INFO(what, ": worst error ", worst);
	CHECK(worst <= tol);
}

double ref_gelu(double x)
{
	return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

} // namespace

TEST_CASE("batched gemm multiplies every item, transposed or not")
{
	const Ops& ops = ops_for(Device{});
	const int64_t batch = 3, m = 4, n = 5, k = 6;
	for (bool ta : {false, true})
		for (bool tb : {false, true}) {
			const Tensor a = random_tensor(ta ? Shape{batch, k, m} : Shape{batch, m, k}, "a");
			const Tensor b = random_tensor(tb ? Shape{batch, n, k} : Shape{batch, k, n}, "b");
			Tensor c = random_tensor({batch, m, n}, "c");
			const Vec va = values(a), vb = values(b), vc = values(c);
			ops.gemm_batched(ta ? Transpose::yes : Transpose::no, tb ? Transpose::yes : Transpose::no, 0.5f, a, b,
					 2.0f, c);
			Vec want(vc.size());
			for (int64_t i = 0; i < batch; ++i)
				for (int64_t r = 0; r < m; ++r)
					for (int64_t col = 0; col < n; ++col) {
						double s = 0;
						for (int64_t j = 0; j < k; ++j)
							s += va[i * m * k + (ta ? j * m + r : r * k + j)] *
							     vb[i * k * n + (tb ? col * k + j : j * n + col)];
						const size_t at = static_cast<size_t>(i * m * n + r * n + col);
						want[at] = 0.5 * s + 2.0 * vc[at];
					}
			CAPTURE(ta);
			CAPTURE(tb);
			check_near(c, want, 1e-5, "batched gemm");
		}
}

TEST_CASE("strided batched gemm computes a block of each item and leaves the rest alone")
{
	const Ops& ops = ops_for(Device{});
	// c's rows 1..3 and columns 2..7 of each item = a's rows 2..4 times b's rows 0..5 transposed,
	// in f32 and bf16 (with ONEDNN_MAX_CPU_ISA=AVX2, bf16 runs on widened copies: the gaps
	// between the block's rows must come back unchanged).
	for (DType type : {DType::f32, DType::bf16}) {
		const auto typed = [&](const Tensor& f32) {
			Tensor t = Tensor::empty(f32.shape(), type, Device{});
			ops.cast(f32, t, false);
			return t;
		};
		const Tensor a = typed(random_tensor({2, 7, 5}, "a")), b = typed(random_tensor({2, 9, 5}, "b"));
		const Tensor c = Tensor::empty({2, 8, 10}, type, Device{});
		ops.fill(c, 7.0f);
		ops.gemm_strided_batched(Transpose::no, Transpose::yes, 1.0f, rows_of(a, 2, 3), rows_of(b, 0, 6), 0.0f,
					 block_of(c, 1, 3, 2, 6));
		const Vec va = values(a), vb = values(b), vc = values(c);
		Vec want(vc.size(), 7.0);
		for (int64_t i = 0; i < 2; ++i)
			for (int64_t r = 0; r < 3; ++r)
				for (int64_t col = 0; col < 6; ++col) {
					double sum = 0;
					for (int64_t j = 0; j < 5; ++j)
						sum += va[static_cast<size_t>(i * 35 + (2 + r) * 5 + j)] *
						       vb[static_cast<size_t>(i * 45 + col * 5 + j)];
					want[static_cast<size_t>(i * 80 + (1 + r) * 10 + 2 + col)] = sum;
				}
		CAPTURE(dtype_name(type));
		check_near(c, want, type == DType::f32 ? 1e-5 : 2e-2, "strided batched gemm");
		for (size_t e = 0; e < vc.size(); ++e)
			if (want[e] == 7.0)
				REQUIRE(vc[e] == 7.0);
	}
}

TEST_CASE("strided batched gemm reads and writes heads inside rows, in groups")
{
	const Ops& ops = ops_for(Device{});
	// Rows [sequences * T, 3 * heads * D] as attention's projection writes them: q k^T per sequence
	// and head with k transposed, into scores [sequences * heads, T, T] grouped by sequence; then
	// y = s v written back side by side into rows [sequences * T, heads * D].
	const int64_t seqs = 2, heads = 3, t = 5, d = 4, w = heads * d;
	const Tensor rows = random_tensor({seqs * t, 3 * w}, "rows");
	const Tensor scores = Tensor::zeros({seqs * heads, t, t}, DType::f32, Device{});
	const Tensor y = Tensor::zeros({seqs * t, w}, DType::f32, Device{});
	const MatrixBatch q = heads_in_rows(rows, seqs, 0, heads, d), k = heads_in_rows(rows, seqs, w, heads, d);
	const MatrixBatch v = heads_in_rows(rows, seqs, 2 * w, heads, d);
	const MatrixBatch s = block_of(scores, 0, t, 0, t).grouped(seqs);
	ops.gemm_strided_batched(Transpose::no, Transpose::yes, 1.0f, q, k, 0.0f, s);
	ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, s, v, 0.0f, heads_in_rows(y, seqs, 0, heads, d));
	const Vec vr = values(rows);
	const auto at = [&](int64_t b, int64_t i, int64_t col) { return vr[static_cast<size_t>((b * t + i) * 3 * w + col)]; };
	Vec want_s(static_cast<size_t>(seqs * heads * t * t)), want_y(static_cast<size_t>(seqs * t * w));
	for (int64_t b = 0; b < seqs; ++b)
		for (int64_t h = 0; h < heads; ++h)
			for (int64_t i = 0; i < t; ++i)
				for (int64_t j = 0; j < t; ++j) {
					double sum = 0;
					for (int64_t e = 0; e < d; ++e)
						sum += at(b, i, h * d + e) * at(b, j, w + h * d + e);
					want_s[static_cast<size_t>(((b * heads + h) * t + i) * t + j)] = sum;
				}
	for (int64_t b = 0; b < seqs; ++b)
		for (int64_t h = 0; h < heads; ++h)
			for (int64_t i = 0; i < t; ++i)
				for (int64_t e = 0; e < d; ++e) {
					double sum = 0;
					for (int64_t j = 0; j < t; ++j)
						sum += want_s[static_cast<size_t>(((b * heads + h) * t + i) * t + j)] *
						       at(b, j, 2 * w + h * d + e);
					want_y[static_cast<size_t>((b * t + i) * w + h * d + e)] = sum;
				}
	check_near(scores, want_s, 1e-5, "heads' scores");
	check_near(y, want_y, 1e-4, "heads written back into rows");
}

TEST_CASE("strided batched gemm refuses views outside their tensor and results that overlap")
{
	const Ops& ops = ops_for(Device{});
	const Tensor a = random_tensor({2, 4, 4}, "a"), b = random_tensor({2, 4, 4}, "b"), c = random_tensor({2, 4, 4}, "c");
	CHECK_THROWS_AS(block_of(a, 2, 3, 0, 4), Error);
	MatrixBatch past = rows_of(c, 0, 4);
	past.offset = 1;
	CHECK_THROWS_AS(ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, rows_of(a, 0, 4), rows_of(b, 0, 4),
						  0.0f, past),
			Error);
	MatrixBatch overlapping = rows_of(c, 0, 4);
	overlapping.stride = 4;
	overlapping.batch = 2;
	CHECK_THROWS_AS(ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, rows_of(a, 0, 4), rows_of(b, 0, 4),
						  0.0f, overlapping),
			Error);
	CHECK_THROWS_AS(ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, rows_of(a, 0, 3), rows_of(b, 0, 4),
						  0.0f, rows_of(c, 0, 4)),
			Error);
}

TEST_CASE("layernorm forward and its three gradients match float64")
{
	const Ops& ops = ops_for(Device{});
	const int64_t rows = 5, c = 12;
	// Rows far from zero: a one-pass variance would lose them.
	Tensor x = random_tensor({rows, c}, "x");
	std::vector<float> shifted = x.to_host_f32();
	for (float& v : shifted)
		v += 100.0f;
	x = Tensor::from_host(shifted, {rows, c}, Device{});
	const Tensor gamma = random_tensor({c}, "g"), beta = random_tensor({c}, "b");
	const Tensor dy = random_tensor({rows, c}, "dy");
	Tensor y = Tensor::empty({rows, c}, DType::f32, Device{}), mean = Tensor::empty({rows}, DType::f32, Device{}),
	       rstd = Tensor::empty({rows}, DType::f32, Device{}), dx = Tensor::empty({rows, c}, DType::f32, Device{});
	Tensor dg = Tensor::from_host(std::vector<float>(c, 1.0f), {c}, Device{});
	Tensor db = Tensor::from_host(std::vector<float>(c, 1.0f), {c}, Device{});
	const float eps = 1e-5f;
	ops.layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
	ops.layernorm_backward(dy, x, gamma, mean, rstd, dx, dg, db, true); // adds to the ones
	const Vec vx = values(x), vg = values(gamma), vb = values(beta), vdy = values(dy);
	Vec want_y(vx.size()), want_dx(vx.size()), want_dg(c, 1.0), want_db(c, 1.0);
	for (int64_t r = 0; r < rows; ++r) {
		double m = 0, var = 0;
		for (int64_t i = 0; i < c; ++i)
			m += vx[r * c + i] / c;
		for (int64_t i = 0; i < c; ++i)
			var += (vx[r * c + i] - m) * (vx[r * c + i] - m) / c;
		const double s = 1 / std::sqrt(var + eps);
		double dn_mean = 0, dn_xhat_mean = 0;
		for (int64_t i = 0; i < c; ++i) {
			const double xhat = (vx[r * c + i] - m) * s, dn = vdy[r * c + i] * vg[i];
			want_y[r * c + i] = xhat * vg[i] + vb[i];
			dn_mean += dn / c;
			dn_xhat_mean += dn * xhat / c;
			want_dg[i] += vdy[r * c + i] * xhat;
			want_db[i] += vdy[r * c + i];
		}
		for (int64_t i = 0; i < c; ++i) {
			const double xhat = (vx[r * c + i] - m) * s;
			want_dx[r * c + i] = s * (vdy[r * c + i] * vg[i] - dn_mean - xhat * dn_xhat_mean);
		}
	}
	check_near(y, want_y, 2e-4, "layernorm output"); // x near 100 keeps ~1e-5 of its centred value
	check_near(dx, want_dx, 2e-3, "layernorm dx");
	check_near(dg, want_dg, 2e-4, "layernorm dgamma");
	check_near(db, want_db, 1e-6, "layernorm dbeta");
}

TEST_CASE("the residual adds beside layernorm are the parts' bits, in place, in f32 and bf16")
{
	const Ops& ops = ops_for(Device{});
	const int64_t rows = 7, c = 40; // a row of two vectors and a tail
	const float eps = 1e-5f;
	for (const DType type : {DType::f32, DType::bf16}) {
		CAPTURE(dtype_name(type));
		const auto of = [&](const char* name) {
			Tensor t = Tensor::empty({rows, c}, type, Device{});
			ops.cast(random_tensor({rows, c}, name), t, false);
			return t;
		};
		const Tensor a = of("a"), b = of("b"), dy = of("dy"), residual = of("res");
		const Tensor gamma = random_tensor({c}, "g"), beta = random_tensor({c}, "b");
		const auto empty = [&](const Shape& shape, DType t) { return Tensor::empty(shape, t, Device{}); };
		// The parts: a copy of a, b added, normalized; its backward, then the residual added.
		const Tensor sum = empty({rows, c}, type), y = empty({rows, c}, type), mean = empty({rows}, DType::f32),
			     rstd = empty({rows}, DType::f32), dx = empty({rows, c}, type);
		const Tensor dg = empty({c}, DType::f32), db = empty({c}, DType::f32);
		ops.cast(a, sum, false);
		ops.accumulate(1.0f, b, sum);
		ops.layernorm_forward(sum, gamma, beta, eps, y, mean, rstd);
		ops.layernorm_backward(dy, sum, gamma, mean, rstd, dx, dg, db, false);
		ops.accumulate(1.0f, residual, dx);
		// Fused, the sum written over a copy of a.
		const Tensor fused_sum = empty({rows, c}, type), fy = empty({rows, c}, type), fmean = empty({rows}, DType::f32),
			     frstd = empty({rows}, DType::f32), fdx = empty({rows, c}, type);
		const Tensor fdg = empty({c}, DType::f32), fdb = empty({c}, DType::f32);
		ops.cast(a, fused_sum, false);
		ops.add_layernorm_forward(fused_sum, b, gamma, beta, eps, fused_sum, fy, fmean, frstd);
		ops.layernorm_backward_add(dy, fused_sum, gamma, fmean, frstd, residual, fdx, fdg, fdb, false);
		for (const auto& [got, want] : {std::pair{fused_sum, sum}, {fy, y}, {fmean, mean}, {frstd, rstd}, {fdx, dx},
						{fdg, dg}, {fdb, db}})
			CHECK(got.to_host_f32() == want.to_host_f32());
		// Into another buffer, a left as it was.
		const std::vector<float> a_before = a.to_host_f32();
		const Tensor other = empty({rows, c}, type);
		ops.add_layernorm_forward(a, b, gamma, beta, eps, other, fy, fmean, frstd);
		CHECK(other.to_host_f32() == sum.to_host_f32());
		CHECK(a.to_host_f32() == a_before);
		// The gain and bias gradients added to, as a step of several micro-batches does.
		ops.layernorm_backward(dy, sum, gamma, mean, rstd, dx, dg, db, true);
		ops.accumulate(1.0f, residual, dx);
		ops.layernorm_backward_add(dy, fused_sum, gamma, fmean, frstd, residual, fdx, fdg, fdb, true);
		CHECK(fdx.to_host_f32() == dx.to_host_f32());
		CHECK(fdg.to_host_f32() == dg.to_host_f32());
		CHECK(fdb.to_host_f32() == db.to_host_f32());
		// A b of another shape: the f32 kernel names the add, the parts name accumulate.
		Tensor wide = Tensor::empty({rows, c + 1}, type, Device{});
		ops.fill(wide, 1.0f);
		CHECK_THROWS_WITH_AS(ops.add_layernorm_forward(a, wide, gamma, beta, eps, other, fy, fmean, frstd),
				     doctest::Contains(type == DType::f32 ? "residual add" : "accumulate"), Error);
	}
}

// (Past |x| ~ 1.8e19, x^2 overflows f32: GELU is still x or 0, but its slope turns NaN, on one side
// or both, as PyTorch's tanh form does; large inputs here stay below that for the slope.)
TEST_CASE("GELU and its slope match float64 over a wide range, large inputs included")
{
	const Ops& ops = ops_for(Device{});
	std::vector<float> xs;
	for (int i = -400; i <= 400; ++i)
		xs.push_back(static_cast<float>(i) / 40.0f);
	for (float big : {30.0f, -30.0f, 1e4f, -1e4f})
		xs.push_back(big);
	const Shape shape = {static_cast<int64_t>(xs.size())};
	const Tensor x = Tensor::from_host(xs, shape, Device{});
	const Tensor dy = Tensor::from_host(std::vector<float>(xs.size(), 1.0f), shape, Device{});
	Tensor y = Tensor::empty(shape, DType::f32, Device{}), dx = Tensor::empty(shape, DType::f32, Device{});
	ops.gelu_forward(x, y);
	ops.gelu_backward(x, dy, dx);
	Vec want_y, want_dx;
	for (float v : xs) {
		want_y.push_back(ref_gelu(v));
		const double h = 1e-4 * std::max(1.0, std::abs(static_cast<double>(v)));
		want_dx.push_back(std::abs(v) > 100 ? (v > 0 ? 1.0 : 0.0) : (ref_gelu(v + h) - ref_gelu(v - h)) / (2 * h));
	}
	check_near(y, want_y, 1e-6, "gelu");
	check_near(dx, want_dx, 1e-5, "gelu slope");
	// The forward alone, where x^3 overflows.
	const Tensor huge = Tensor::from_host({1e30f, -1e30f}, {2}, Device{});
	Tensor out = Tensor::empty({2}, DType::f32, Device{});
	ops.gelu_forward(huge, out);
	check_near(out, {1e30, 0.0}, 1e-6, "gelu of huge inputs");
	// A NaN stays NaN both ways (the AVX-512 loop clamps exp's argument, which a NaN passes as -87.3).
	const Tensor nan = Tensor::from_host({std::nanf(""), 1.0f}, {2}, Device{});
	const Tensor nan_dy = Tensor::from_host({1.0f, std::nanf("")}, {2}, Device{});
	Tensor nan_dx = Tensor::empty({2}, DType::f32, Device{});
	ops.gelu_forward(nan, out);
	ops.gelu_backward(nan, nan_dy, nan_dx);
	CHECK(std::isnan(out.to_host_f32()[0]));
	CHECK(std::isnan(nan_dx.to_host_f32()[0]));
	CHECK(std::isnan(nan_dx.to_host_f32()[1])); // dy is NaN there
}

// Linear keeps GELU's slope where the backend says so (the CPU in f32): the forward's value and the
// backward's dx and bias gradient must be those of the pre-activation path to the bit, also with
// the gradient written over the slope, as Linear does. (With ONEDNN_MAX_CPU_ISA=AVX2, the -avx2
// run, the portable loops; otherwise the AVX-512 ones where the CPU has it.)
TEST_CASE("GELU with its slope kept gives gelu_forward's and gelu_backward_bias_grad's bits, in place")
{
	const Ops& ops = ops_for(Device{});
	REQUIRE(ops.gelu_keeps_slope(DType::f32));
	CHECK_FALSE(ops.gelu_keeps_slope(DType::bf16));
	const int64_t rows = 9, channels = 40; // two whole vectors of 16 and a tail of 8 a row
	std::vector<float> xs = random_tensor({rows, channels}, "slope x", 4.0f).to_host_f32();
	xs[3] = 30.0f, xs[4] = -30.0f, xs[5] = 1e4f, xs[6] = -1e4f, xs[channels - 1] = 0.0f;
	const Tensor x = Tensor::from_host(xs, {rows, channels}, Device{});
	const Tensor dy = random_tensor({rows, channels}, "slope dy");
	for (bool add : {false, true}) {
		CAPTURE(add);
		Tensor y = Tensor::empty({rows, channels}, DType::f32, Device{}), dx = Tensor::empty({rows, channels}, DType::f32, Device{});
		Tensor db = random_tensor({channels}, "slope db");
		ops.gelu_forward(x, y);
		ops.gelu_backward_bias_grad(x, dy, dx, db, add);
		Tensor kept = Tensor::from_host(xs, {rows, channels}, Device{});
		Tensor y2 = Tensor::empty({rows, channels}, DType::f32, Device{});
		Tensor db2 = random_tensor({channels}, "slope db");
		ops.gelu_forward_slope(kept, y2);
		CHECK(y2.to_host_f32() == y.to_host_f32());
		ops.slope_backward_bias_grad(kept, dy, kept, db2, add);
		CHECK(kept.to_host_f32() == dx.to_host_f32());
		CHECK(db2.to_host_f32() == db.to_host_f32());
	}
	// A NaN input has a NaN slope.
	Tensor nan = Tensor::from_host({std::nanf(""), 1.0f}, {1, 2}, Device{});
	Tensor nan_y = Tensor::empty({1, 2}, DType::f32, Device{});
	ops.gelu_forward_slope(nan, nan_y);
	CHECK(std::isnan(nan_y.to_host_f32()[0]));
	CHECK(std::isnan(nan.to_host_f32()[0]));
	// Other types, y over x, and a backend without the kept slope are refused with the reason.
	Tensor half = Tensor::empty({rows, channels}, DType::bf16, Device{});
	CHECK_THROWS_WITH_AS(ops.gelu_forward_slope(half, half), doctest::Contains("f32"), Error);
	CHECK_THROWS_WITH_AS(ops.gelu_forward_slope(x, x), doctest::Contains("must not be x"), Error);
	Tensor y = Tensor::empty({rows, channels}, DType::f32, Device{});
	CHECK_THROWS_WITH_AS(ops.Ops::gelu_forward_slope(x, y), doctest::Contains("keeps GELU's input"), Error);
	CHECK_THROWS_WITH_AS(ops.Ops::slope_backward_bias_grad(x, dy, y, random_tensor({channels}, "db"), false),
			     doctest::Contains("keeps GELU's input"), Error);
}

TEST_CASE("the causal softmax sees only the past, and its gradient matches float64")
{
	const Ops& ops = ops_for(Device{});
	const int64_t n = 2, t = 5;
	const float scale = 0.5f;
	const Tensor s = random_tensor({n, t, t}, "s", 4.0f), dp = random_tensor({n, t, t}, "dp");
	Tensor p = Tensor::empty({n, t, t}, DType::f32, Device{});
	ops.causal_softmax_forward(s, scale, p);
	Tensor ds = dp.clone(); // in place, as attention calls it
	ops.causal_softmax_backward(p, ds, scale, ds);
	const Vec vs = values(s), vdp = values(dp);
	Vec want_p(vs.size(), 0.0), want_ds(vs.size(), 0.0);
	for (int64_t row = 0; row < n * t; ++row) {
		const int64_t i = row % t;
		double top = -1e300, sum = 0, dot = 0;
		for (int64_t j = 0; j <= i; ++j)
			top = std::max(top, scale * vs[row * t + j]);
		for (int64_t j = 0; j <= i; ++j)
			sum += std::exp(scale * vs[row * t + j] - top);
		for (int64_t j = 0; j <= i; ++j) {
			want_p[row * t + j] = std::exp(scale * vs[row * t + j] - top) / sum;
			dot += want_p[row * t + j] * vdp[row * t + j];
		}
		for (int64_t j = 0; j <= i; ++j)
			want_ds[row * t + j] = scale * want_p[row * t + j] * (vdp[row * t + j] - dot);
	}
	check_near(p, want_p, 1e-6, "causal softmax");
	check_near(ds, want_ds, 1e-6, "causal softmax gradient");
}

namespace {

// Causal attention of qkv [B * T, 3 * H * D] in float64: y [B * T, H * D], probs (below the
// diagonal) and dqkv from dy.
struct AttentionReference {
	Vec y, probs, dqkv;
};

AttentionReference reference_attention(const Vec& qkv, const Vec& dy, int64_t b, int64_t t, int64_t h, int64_t d)
{
	const int64_t w = h * d;
	AttentionReference r{Vec(static_cast<size_t>(b * t * w), 0.0), Vec(static_cast<size_t>(b * h * t * t), 0.0),
			     Vec(qkv.size(), 0.0)};
	const double scale = 1.0 / std::sqrt(static_cast<double>(d));
	for (int64_t item = 0; item < b * h; ++item) {
		const int64_t row0 = (item / h) * t, col = (item % h) * d;
		const auto at = [&](int64_t part, int64_t i, int64_t e) { return qkv[(row0 + i) * 3 * w + part * w + col + e]; };
		const auto grad = [&](int64_t part, int64_t i, int64_t e) -> double& {
			return r.dqkv[(row0 + i) * 3 * w + part * w + col + e];
		};
		double* p = &r.probs[item * t * t];
		Vec ds(static_cast<size_t>(t * t), 0.0);
		for (int64_t i = 0; i < t; ++i) {
			double top = -1e300, sum = 0.0, dot = 0.0;
			Vec sc(static_cast<size_t>(i + 1)), dp(static_cast<size_t>(i + 1));
			for (int64_t j = 0; j <= i; ++j) {
				for (int64_t e = 0; e < d; ++e)
					sc[j] += at(0, i, e) * at(1, j, e) * scale;
				top = std::max(top, sc[j]);
			}
			for (int64_t j = 0; j <= i; ++j)
				sum += std::exp(sc[j] - top);
			for (int64_t j = 0; j <= i; ++j) {
				p[i * t + j] = std::exp(sc[j] - top) / sum;
				for (int64_t e = 0; e < d; ++e) {
					r.y[(row0 + i) * w + col + e] += p[i * t + j] * at(2, j, e);
					dp[j] += dy[(row0 + i) * w + col + e] * at(2, j, e);
				}
				dot += p[i * t + j] * dp[j];
			}
			for (int64_t j = 0; j <= i; ++j) {
				ds[i * t + j] = scale * p[i * t + j] * (dp[j] - dot);
				for (int64_t e = 0; e < d; ++e) {
					grad(2, j, e) += p[i * t + j] * dy[(row0 + i) * w + col + e];
					grad(0, i, e) += ds[i * t + j] * at(1, j, e);
					grad(1, j, e) += ds[i * t + j] * at(0, i, e);
				}
			}
		}
	}
	return r;
}

} // namespace

// The CPU's own f32 kernels where this CPU has them (tiles of 8 rows, 32 columns, padded to
// vectors), the default blocks otherwise (bf16, and f32 under ONEDNN_MAX_CPU_ISA=AVX2): T = 72 is
// not a whole number of blocks or vectors, D = 16 fills half a tile's columns.
TEST_CASE("causal attention forward and backward match float64, in f32 and bf16")
{
	const Ops& ops = ops_for(Device{});
	struct Size {
		int64_t b, t, h, d;
	};
	for (const Size z : {Size{2, 72, 2, 64}, Size{1, 20, 3, 16}, Size{1, 37, 2, 24}})
		for (DType type : {DType::f32, DType::bf16}) {
			CAPTURE(z.t);
			CAPTURE(z.d);
			CAPTURE(dtype_name(type));
			const int64_t w = z.h * z.d;
			const auto make = [&](const Shape& shape, const char* name) {
				Tensor out = Tensor::empty(shape, type, Device{});
				ops.cast(random_tensor(shape, name, 2.0f), out, false);
				return out;
			};
			const Tensor qkv = make({z.b * z.t, 3 * w}, "qkv"), dy = make({z.b * z.t, w}, "dy");
			const Shape square{z.b * z.h, z.t, z.t};
			const bool room = ops.causal_attention_uses_room(type);
			const Tensor scores = room ? Tensor::empty(square, type, Device{}) : Tensor();
			const Tensor dprobs = room ? Tensor::empty(square, type, Device{}) : Tensor();
			const Tensor probs = Tensor::empty(square, type, Device{});
			const Tensor y = Tensor::empty({z.b * z.t, w}, type, Device{}), dqkv = Tensor::empty(qkv.shape(), type, Device{});
			ops.fill(dqkv, 7.0f); // every element must be written
			ops.causal_attention_forward(qkv, z.b, z.h, scores, probs, y);
			ops.causal_attention_backward(qkv, probs, dy, z.b, z.h, dprobs, dqkv);
			const AttentionReference want = reference_attention(values(qkv), values(dy), z.b, z.t, z.h, z.d);
			const double tol = type == DType::f32 ? 1e-5 : 3e-2;
			check_near(y, want.y, tol, "attention output");
			check_near(dqkv, want.dqkv, tol, "attention qkv gradient");
			const Vec got_p = values(probs);
			double worst = 0.0;
			for (int64_t item = 0; item < z.b * z.h; ++item)
				for (int64_t i = 0; i < z.t; ++i)
					for (int64_t j = 0; j <= i; ++j) {
						const size_t at = static_cast<size_t>((item * z.t + i) * z.t + j);
						worst = std::max(worst, std::abs(got_p[at] - want.probs[at]));
					}
			CHECK(worst <= tol);
			// Either backward may follow either forward: the default's, which reads whole blocks
			// of the probabilities, after the CPU's own forward.
			if (!room) {
				const Tensor dprobs_room = Tensor::empty(square, type, Device{});
				ops.fill(dqkv, 7.0f);
				ops.Ops::causal_attention_backward(qkv, probs, dy, z.b, z.h, dprobs_room, dqkv);
				check_near(dqkv, want.dqkv, tol, "the default backward after the CPU's own forward");
			}
		}
	const Tensor qkv = random_tensor({8, 12}, "qkv"), y = random_tensor({8, 3}, "y");
	const Tensor probs = Tensor::empty({4, 4, 4}, DType::f32, Device{});
	CHECK_THROWS_WITH_AS(ops.causal_attention_forward(qkv, 2, 2, probs, probs, y),
			     doctest::Contains("needs probabilities [4, 4, 4] and output [8, 4]"), Error);
}

TEST_CASE("heads move between [B, T, W] rows and [B, H, T, D] and back")
{
	const Ops& ops = ops_for(Device{});
	const int64_t b = 2, t = 3, h = 2, d = 4, w = 3 * h * d;
	const Tensor rows = random_tensor({b, t, w}, "rows");
	Tensor heads = Tensor::empty({b, h, t, d}, DType::f32, Device{});
	ops.permute_heads(rows, h * d, heads, true); // the keys' columns
	const Vec vr = values(rows), vh = values(heads);
	for (int64_t bi = 0; bi < b; ++bi)
		for (int64_t hi = 0; hi < h; ++hi)
			for (int64_t ti = 0; ti < t; ++ti)
				for (int64_t di = 0; di < d; ++di)
					REQUIRE(vh[((bi * h + hi) * t + ti) * d + di] == vr[(bi * t + ti) * w + h * d + hi * d + di]);
	Tensor back = Tensor::zeros({b, t, w}, DType::f32, Device{});
	ops.permute_heads(back, h * d, heads, false);
	const Vec vb = values(back);
	for (int64_t i = 0; i < b * t * w; ++i) {
		const int64_t col = i % w;
		CHECK(vb[i] == (col >= h * d && col < 2 * h * d ? vr[i] : 0.0));
	}
	CHECK_THROWS_AS(ops.permute_heads(rows, 2 * h * d + 1, heads, true), Error);
}

TEST_CASE("windows split into inputs and targets; embeddings gather and their gradient adds per token")
{
	const Ops& ops = ops_for(Device{});
	const int64_t b = 2, t = 3, vocab = 4, c = 2;
	Tensor windows = Tensor::empty({b, t + 1}, DType::i32, Device{});
	const int32_t tokens[] = {1, 3, 1, 0, 2, 2, 3, 1};
	std::copy(std::begin(tokens), std::end(tokens), windows.data_as<int32_t>());
	Tensor inputs = Tensor::empty({b * t}, DType::i32, Device{}), targets = Tensor::empty({b * t}, DType::i32, Device{});
	ops.split_windows(windows, inputs, targets);
	const std::vector<int32_t> in(inputs.data_as<int32_t>(), inputs.data_as<int32_t>() + b * t),
		out(targets.data_as<int32_t>(), targets.data_as<int32_t>() + b * t);
	CHECK(in == std::vector<int32_t>{1, 3, 1, 2, 2, 3});
	CHECK(out == std::vector<int32_t>{3, 1, 0, 2, 3, 1});
	const Tensor table = random_tensor({vocab, c}, "table");
	Tensor x = Tensor::empty({b * t, c}, DType::f32, Device{});
	ops.embedding_forward(inputs, table, x);
	const Vec vt = values(table), vx = values(x);
	for (int64_t i = 0; i < b * t; ++i)
		for (int64_t j = 0; j < c; ++j)
			CHECK(vx[i * c + j] == vt[in[i] * c + j]);
	const Tensor dx = random_tensor({b * t, c}, "dx");
	Tensor dtable = Tensor::from_host(std::vector<float>(vocab * c, 7.0f), {vocab, c}, Device{});
	ops.embedding_backward(inputs, dx, dtable, false); // overwrites
	const Vec vdx = values(dx);
	Vec want(vocab * c, 0.0);
	for (int64_t i = 0; i < b * t; ++i)
		for (int64_t j = 0; j < c; ++j)
			want[in[i] * c + j] += vdx[i * c + j];
	check_near(dtable, want, 1e-6, "embedding gradient");
	inputs.data_as<int32_t>()[4] = vocab; // out of the vocabulary
	CHECK_THROWS_WITH_AS(ops.embedding_forward(inputs, table, x), doctest::Contains("outside the vocabulary [0, 4)"),
			     Error);
}
