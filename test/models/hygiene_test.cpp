// Gradient hygiene ops: finiteness, sum of squares and scaling against float64 references.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "models/init.h"
#include "models/kernels/ops.h"
#include "base/error.h"
#include "test/harness/mpi_main.h"

using namespace tower;

TEST_CASE("all_finite finds one inf or NaN anywhere, including the tail past a vector width")
{
	for (int64_t n : {1, 7, 1000, 4099}) {
		CAPTURE(n);
		const std::vector<float> clean = seeded_uniform("g", 1, n, 3.0f);
		CHECK(all_finite(Tensor::from_host(clean, {n}, Device{})));
		for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
				  std::numeric_limits<float>::quiet_NaN()})
			for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
				std::vector<float> v = clean;
				v[static_cast<size_t>(at)] = bad;
				CHECK_FALSE(all_finite(Tensor::from_host(v, {n}, Device{})));
			}
	}
	const std::vector<float> big = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()};
	CHECK(all_finite(Tensor::from_host(big, {2}, Device{})));
	CHECK(all_finite(Tensor::zeros({0}, DType::f32, Device{})));
}

TEST_CASE("sum_of_squares matches a float64 sum and does not overflow on large finite values")
{
	for (int64_t n : {0, 5, 1001, 65537}) {
		CAPTURE(n);
		const std::vector<float> v = seeded_uniform("g", 2, n, 10.0f);
		double want = 0.0;
		for (float x : v)
			want += static_cast<double>(x) * x;
		CHECK(sum_of_squares(Tensor::from_host(v, {n}, Device{})) == doctest::Approx(want).epsilon(1e-12));
	}
	const std::vector<float> big = {3e38f, 3e38f};
	CHECK(sum_of_squares(Tensor::from_host(big, {2}, Device{})) == doctest::Approx(2 * 9e76).epsilon(1e-6));
	const std::vector<float> nan = {1.0f, std::numeric_limits<float>::quiet_NaN()};
	CHECK(std::isnan(sum_of_squares(Tensor::from_host(nan, {2}, Device{}))));
}

TEST_CASE("scale multiplies in place, and the hygiene ops take f32 only")
{
	const std::vector<float> v = seeded_uniform("g", 3, 33, 1.0f);
	const Tensor t = Tensor::from_host(v, {33}, Device{});
	scale(t, 0.125f);
	const std::vector<float> got = t.to_host_f32();
	for (size_t i = 0; i < v.size(); ++i)
		CHECK(got[i] == v[i] * 0.125f);
	const Tensor h = Tensor::zeros({4}, DType::f16, Device{});
	CHECK_THROWS_WITH_AS(all_finite(h), doctest::Contains("must be f32"), Error);
	CHECK_THROWS_WITH_AS(sum_of_squares(h), doctest::Contains("must be f32"), Error);
}
