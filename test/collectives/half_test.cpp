// The array conversions (vectorized where the CPU allows) agree with the scalar ones bit for bit.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "runtime/base/half.h"

using namespace tower;

namespace {

bool same_value(float a, float b)
{
	if (std::isnan(a) || std::isnan(b))
		return std::isnan(a) && std::isnan(b);
	uint32_t x = 0, y = 0;
	std::memcpy(&x, &a, 4);
	std::memcpy(&y, &b, 4);
	return x == y;
}

bool is_f16_nan(uint16_t bits)
{
	return (bits & 0x7c00) == 0x7c00 && (bits & 0x03ff) != 0;
}

// Normal and subnormal values, exact halfway cases, the edges of the f16 range, infinities, NaN.
std::vector<float> awkward_floats()
{
	std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f,
				6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 1e-10f,
				std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
				std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()};
	for (uint32_t h = 0; h < 0x7c00; h += 7) // midpoints between neighbouring f16 values
		v.push_back(0.5f * (f16_to_f32(static_cast<uint16_t>(h)) + f16_to_f32(static_cast<uint16_t>(h + 1))));
	std::mt19937 gen(5);
	std::uniform_real_distribution<float> wide(-70000.0f, 70000.0f);
	for (int i = 0; i < 20000; ++i)
		v.push_back(wide(gen));
	return v;
}

} // namespace

TEST_CASE("widen_f16 equals f16_to_f32 for every bit pattern")
{
	std::vector<uint16_t> all(65536 + 5); // an odd length reaches the scalar tail too
	for (size_t i = 0; i < all.size(); ++i)
		all[i] = static_cast<uint16_t>(i);
	std::vector<float> out(all.size());
	widen_f16(all.data(), out.data(), all.size());
	size_t wrong = 0;
	for (size_t i = 0; i < all.size(); ++i)
		wrong += same_value(out[i], f16_to_f32(all[i])) ? 0 : 1;
	CHECK(wrong == 0);
}

TEST_CASE("narrow_f16 and narrow_bf16 equal the scalar forms, rounding ties to even")
{
	const auto in = awkward_floats();
	std::vector<uint16_t> h(in.size()), b(in.size());
	narrow_f16(in.data(), h.data(), in.size());
	narrow_bf16(in.data(), b.data(), in.size());
	size_t wrong_h = 0, wrong_b = 0;
	for (size_t i = 0; i < in.size(); ++i) {
		const uint16_t sh = f32_to_f16(in[i]);
		wrong_h += (h[i] == sh || (is_f16_nan(h[i]) && is_f16_nan(sh))) ? 0 : 1;
		wrong_b += (b[i] == f32_to_bf16(in[i]) || (std::isnan(in[i]))) ? 0 : 1;
	}
	CHECK(wrong_h == 0);
	CHECK(wrong_b == 0);
	CHECK(f32_to_f16(65520.0f) == 0x7c00); // rounds up to infinity
	CHECK(f32_to_f16(65519.99f) == 0x7bff);
}
