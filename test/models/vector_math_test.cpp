// The CPU's vector loops' own contracts: a row's maximum, and sums in sixteen lanes whose order
// (and so whose bits) is fixed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "models/init.h"
#include "models/kernels/cpu/vector_math.h"
#include "test/harness/mpi_main.h"

using namespace tower;

namespace {

// lane_sum's order spelled out: lane j takes terms j, j + 16, ...; the tail goes to lane 0; then
// s[j] += s[j + width] for width 8, 4, 2, 1.
float sum_in_lanes(const std::vector<float>& x)
{
	const int64_t n = static_cast<int64_t>(x.size());
	float s[16] = {};
	int64_t i = 0;
	for (; i + 16 <= n; i += 16)
		for (int64_t j = 0; j < 16; ++j)
			s[j] += x[i + j];
	for (; i < n; ++i)
		s[0] += x[i];
	for (int64_t width = 8; width > 0; width /= 2)
		for (int64_t j = 0; j < width; ++j)
			s[j] += s[j + width];
	return s[0];
}

} // namespace

TEST_CASE("a row's maximum in sixteen running maxima: every position, tails, NaN")
{
	for (const int64_t n : {1, 5, 16, 17, 31, 32, 33, 256, 301}) {
		CAPTURE(n);
		const std::vector<float> base = seeded_uniform("max", static_cast<uint64_t>(n), n, 1.0f);
		for (int64_t at = 0; at < n; ++at) {
			std::vector<float> x = base;
			x[at] = 2.0f;
			CHECK(max_f32(x.data(), n) == 2.0f);
		}
		std::vector<float> x = base;
		const float plain = *std::max_element(x.begin(), x.end());
		x[n - 1] = std::numeric_limits<float>::quiet_NaN(); // passed over after x[0]
		if (n > 1)
			CHECK(max_f32(x.data(), n) == *std::max_element(x.begin(), x.end() - 1));
		x = base;
		x[0] = std::numeric_limits<float>::quiet_NaN(); // x[0] NaN is the result
		CHECK(std::isnan(max_f32(x.data(), n)));
		CHECK(max_f32(base.data(), n) == plain);
	}
}

// Terms of many magnitudes, so that another order of the additions rounds differently.
TEST_CASE("lane_sum adds in its stated order at every length, tails included")
{
	for (int64_t n = 0; n <= 80; ++n) {
		CAPTURE(n);
		std::vector<float> x = seeded_uniform("lanes", static_cast<uint64_t>(n), n, 1.0f);
		for (int64_t i = 0; i < n; ++i)
			x[i] *= std::ldexp(1.0f, static_cast<int>((i * 7) % 23) - 11);
		CHECK(lane_sum(n, [&](int64_t i) { return x[i]; }) == sum_in_lanes(x));
	}
	// Where the order shows: 2^24 in lane 0 absorbs each 1 of the tail added to it one at a time,
	// and then lane 1's; the tail spread over lanes 0 and 1 would give 2^24 + 2.
	std::vector<float> x(18, 0.0f);
	x[0] = 16777216.0f, x[1] = 1.0f, x[16] = 1.0f, x[17] = 1.0f;
	CHECK(sum_in_lanes(x) == 16777216.0f);
	CHECK(lane_sum(18, [&](int64_t i) { return x[i]; }) == 16777216.0f);
}
