// The int8 block mean: within its stated bound of the exact mean (computed in f64 from every
// rank's values; from 3 ranks on with the sharded mean's second rounding), the same bits on every
// rank, and a non-finite block stays non-finite.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "base/mpi/mpi_check.h"
#include "collectives/quantized/int8_mean.h"
#include "runtime/safety/replica_check.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

// Rank r's values: blocks of very different magnitudes, so a shared scale would not do.
std::vector<float> values_of(int rank, int64_t count)
{
	std::mt19937 random(static_cast<unsigned>(1234 + rank));
	std::normal_distribution<float> normal;
	std::vector<float> v(static_cast<size_t>(count));
	for (int64_t i = 0; i < count; ++i)
		v[static_cast<size_t>(i)] = normal(random) * std::pow(10.0f, static_cast<float>((i / 300) % 5) - 2.0f);
	return v;
}

// The sharded mean ends quantized: each block's values are whole steps of max|block| / 127 (a
// mean of several ranks' blocks, as the gather gives, is not).
void check_on_block_grids(const std::vector<float>& mean)
{
	const int64_t count = static_cast<int64_t>(mean.size());
	double off_grid = 0;
	for (int64_t b = 0; b < int8_blocks_of(count); ++b) {
		const int64_t first = b * int8_block_values, end = std::min(count, first + int8_block_values);
		float largest = 0;
		for (int64_t i = first; i < end; ++i)
			largest = std::max(largest, std::fabs(mean[static_cast<size_t>(i)]));
		const double step = largest / 127.0;
		for (int64_t i = first; i < end && step > 0; ++i) {
			const double steps = mean[static_cast<size_t>(i)] / step;
			off_grid = std::max(off_grid, std::fabs(steps - std::nearbyint(steps)));
		}
	}
	CHECK(off_grid < 1e-3);
}

} // namespace

TEST_CASE("the int8 block mean is within its bound of the exact mean, the same on every rank")
{
	const int n = world().size();
	for (const int64_t count : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{1000}, int64_t{70001}}) {
		CAPTURE(count);
		Int8Mean mean(world().comm());
		std::vector<float> mine = values_of(world().rank(), count);
		mean.run(mine.data(), count);
		// The exact mean and the bound, from every rank's values.
		std::vector<double> exact(static_cast<size_t>(count), 0.0), bound(static_cast<size_t>(count), 0.0);
		for (int r = 0; r < n; ++r) {
			const std::vector<float> theirs = values_of(r, count);
			for (int64_t b = 0; b < int8_blocks_of(count); ++b) {
				const int64_t first = b * int8_block_values, end = std::min(count, first + int8_block_values);
				float largest = 0;
				for (int64_t i = first; i < end; ++i)
					largest = std::max(largest, std::fabs(theirs[static_cast<size_t>(i)]));
				for (int64_t i = first; i < end; ++i) {
					exact[static_cast<size_t>(i)] += theirs[static_cast<size_t>(i)] / static_cast<double>(n);
					bound[static_cast<size_t>(i)] += largest / 254.0 / static_cast<double>(n);
				}
			}
		}
		// From 3 ranks on the mean is quantized again: by up to max|block of the mean| / 254, where
		// the mean before that rounding is within `bound` of the exact one.
		if (n > Int8Mean::gather_ranks) {
			for (int64_t b = 0; b < int8_blocks_of(count); ++b) {
				const int64_t first = b * int8_block_values, end = std::min(count, first + int8_block_values);
				double largest = 0;
				for (int64_t i = first; i < end; ++i)
					largest = std::max(largest, std::fabs(exact[static_cast<size_t>(i)]) + bound[static_cast<size_t>(i)]);
				for (int64_t i = first; i < end; ++i)
					bound[static_cast<size_t>(i)] += largest / 254.0;
			}
		}
		double worst = 0, largest_error = 0;
		for (int64_t i = 0; i < count; ++i) {
			const double error = std::fabs(mine[static_cast<size_t>(i)] - exact[static_cast<size_t>(i)]);
			// The f32 sums add a few rounding steps of the values' own size on top of the bound.
			worst = std::max(worst, error / (bound[static_cast<size_t>(i)] * (1 + 1e-4) + 1e-7 * std::fabs(exact[static_cast<size_t>(i)]) + 1e-30));
			largest_error = std::max(largest_error, error);
		}
		CHECK(worst <= 1.0);
		if (n > Int8Mean::gather_ranks)
			check_on_block_grids(mine);
		if (count >= 256)
			CHECK(largest_error > 0); // it is lossy: the check above is not vacuous
		check_replicas_of(world().comm(), {{"mean", Tensor::view(mine.data(), {count}, DType::f32, Device{})}});
		CHECK(int8_bytes_of(count) == count + 4 * ((count + 255) / 256));
	}
}

TEST_CASE("a block holding an inf or NaN on one rank is NaN in the mean, and only that block")
{
	Int8Mean mean(world().comm());
	std::vector<float> v(600, 1.0f);
	if (world().rank() == world().size() - 1)
		v[300] = std::numeric_limits<float>::infinity();
	mean.run(v.data(), 600);
	CHECK(std::isnan(v[256]));
	CHECK(std::isnan(v[511]));
	CHECK(v[255] == doctest::Approx(1.0));
	CHECK(v[512] == doctest::Approx(1.0));
}
