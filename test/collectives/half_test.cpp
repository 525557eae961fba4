// The 16-bit conversions against hand-written bit patterns, and the vectorized f16 array forms
// against the scalar ones bit for bit.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "base/tensor/half.h"

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

bool is_bf16_nan(uint16_t bits)
{
	return (bits & 0x7f80) == 0x7f80 && (bits & 0x007f) != 0;
}

bool is_f32_nan(uint32_t bits)
{
	return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0;
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

// One row of a conversion table: an input bit pattern and the bits it must become. A NaN
// expectation accepts any NaN of that format (the payload is not part of the contract).
struct Narrowing {
	uint32_t f32;
	uint16_t want;
};

struct Widening {
	uint16_t half;
	uint32_t want;
};

// f32 -> f16. f16 is 1 sign, 5 exponent (bias 15) and 10 fraction bits; f32 has 8 exponent bits
// (bias 127) and 23 fraction bits, so an f16 ulp at exponent e is 2^(e-10) and a normal f32 keeps
// 13 bits more. Subnormal f16 steps are 2^-24 (f32 exponent field 103 = 0x67).
constexpr Narrowing f16_table[] = {
	{0x00000000, 0x0000}, // +0
	{0x80000000, 0x8000}, // -0 keeps its sign
	{0x3f800000, 0x3c00}, // 1: exponent 0 -> field 15
	{0xc0000000, 0xc000}, // -2: exponent 1 -> field 16
	{0x3dcccccd, 0x2e66}, // 0.1f: fraction 0x4ccccd, top 10 bits 0x266, next bit 0: rounds down
	{0x3f801000, 0x3c00}, // 1 + 2^-11, halfway between 1 (even) and 1 + 2^-10: ties to even, down
	{0x3f803000, 0x3c02}, // 1 + 3 x 2^-11, halfway between fraction 1 (odd) and 2: ties to even, up
	{0x3f801001, 0x3c01}, // just above halfway: up
	{0x3f800fff, 0x3c00}, // just below halfway: down
	{0x477fe000, 0x7bff}, // 65504 = (2 - 2^-10) x 2^15, the largest finite f16
	{0x477fefff, 0x7bff}, // just below 65520: stays finite
	{0x477ff000, 0x7c00}, // 65520, halfway to 2^16; 0x3ff is odd so it rounds up, past the range: inf
	{0xc77ff000, 0xfc00}, // -65520: -inf
	{0x49800000, 0x7c00}, // 2^20: inf
	{0x7f800000, 0x7c00}, // inf
	{0xff800000, 0xfc00}, // -inf
	{0x38800000, 0x0400}, // 2^-14, the smallest normal f16
	{0x387fc000, 0x03ff}, // 1023 x 2^-24 = 1.111111111b x 2^-15, the largest subnormal
	{0x33800000, 0x0001}, // 2^-24, the smallest subnormal
	{0x33c00000, 0x0002}, // 1.5 x 2^-24, halfway between 1 (odd) and 2 subnormal steps: up to 2
	{0x33000000, 0x0000}, // 2^-25, halfway between 0 (even) and 2^-24: down to +0
	{0xb3000000, 0x8000}, // -2^-25: down to -0
	{0x33000001, 0x0001}, // just above 2^-25: up
	{0x00000001, 0x0000}, // the smallest f32 subnormal: +0
	{0x80000001, 0x8000}, // its negative: -0
	{0x7fc00000, 0x7e00}, // quiet NaN: any NaN
	{0x7f800001, 0x7e00}, // NaN with only the lowest fraction bit set; dropping 13 bits would make it inf
	{0xffc00000, 0xfe00}, // negative NaN: any NaN
};

// f32 -> bf16: bf16 is the upper 16 bits of an f32 (7 fraction bits), rounded on the lower 16.
constexpr Narrowing bf16_table[] = {
	{0x00000000, 0x0000}, // +0
	{0x80000000, 0x8000}, // -0
	{0x3f800000, 0x3f80}, // 1
	{0xc0400000, 0xc040}, // -3
	{0x3f808000, 0x3f80}, // lower half exactly 0x8000, upper 0x3f80 even: ties to even, down
	{0x3f818000, 0x3f82}, // upper 0x3f81 odd: ties to even, up
	{0x3f808001, 0x3f81}, // above halfway: up
	{0x3f807fff, 0x3f80}, // below halfway: down
	{0x3f80ffff, 0x3f81}, // up, into the next fraction
	{0x3fffffff, 0x4000}, // up, the carry moving into the exponent: 2
	{0x7f7f7fff, 0x7f7f}, // the largest finite bf16, (2 - 2^-7) x 2^127
	{0x7f7f8000, 0x7f80}, // halfway above it, 0x7f7f odd: up, past the range: inf
	{0x7f7fffff, 0x7f80}, // the largest f32: inf
	{0xff7fffff, 0xff80}, // its negative: -inf
	{0x7f800000, 0x7f80}, // inf
	{0xff800000, 0xff80}, // -inf
	{0x00010000, 0x0001}, // 2^-133, the smallest bf16 subnormal, exact
	{0x00008000, 0x0000}, // halfway between 0 (even) and it: +0
	{0x00018000, 0x0002}, // halfway between 1 (odd) and 2 subnormal steps: 2
	{0x80008001, 0x8001}, // negative, above halfway: -1 step
	{0x00000001, 0x0000}, // the smallest f32 subnormal: +0
	{0x007fffff, 0x0080}, // the largest f32 subnormal rounds up to the smallest normal, 2^-126
	{0x7fc00000, 0x7fc0}, // quiet NaN
	{0x7f800001, 0x7fc0}, // NaN in the lowest bit only; rounding alone would give inf (0x7f80)
	{0x7fffffff, 0x7fc0}, // NaN with every fraction bit; rounding alone would carry into -0 (0x8000)
	{0xffffffff, 0xffc0}, // negative NaN; rounding alone would wrap to +0
};

// f16 -> f32 is exact: the sign moves to bit 31, the exponent is rebiased by 127 - 15 = 112 and
// the fraction gains 13 zero bits; a subnormal f16 becomes a normal f32.
constexpr Widening f16_widen_table[] = {
	{0x0000, 0x00000000}, // +0
	{0x8000, 0x80000000}, // -0
	{0x3c00, 0x3f800000}, // 1
	{0xc000, 0xc0000000}, // -2
	{0x3555, 0x3eaaa000}, // field 13 -> 125 (0x7d), fraction 0x155 -> 0x155 << 13: 0.33325195
	{0x7bff, 0x477fe000}, // 65504
	{0x0400, 0x38800000}, // 2^-14: field 1 -> 113 (0x71)
	{0x03ff, 0x387fc000}, // the largest subnormal, 1023 x 2^-24: normal in f32
	{0x0200, 0x38000000}, // 512 x 2^-24 = 2^-15: field 112 (0x70)
	{0x0001, 0x33800000}, // 2^-24: field 103 (0x67)
	{0x8001, 0xb3800000}, // -2^-24
	{0x7c00, 0x7f800000}, // inf
	{0xfc00, 0xff800000}, // -inf
	{0x7e00, 0x7fc00000}, // quiet NaN: any NaN
	{0x7c01, 0x7fc02000}, // NaN in the lowest bit: any NaN, not inf
};

// bf16 -> f32 appends 16 zero bits.
constexpr Widening bf16_widen_table[] = {
	{0x0000, 0x00000000}, {0x8000, 0x80000000}, {0x3f80, 0x3f800000}, {0xc040, 0xc0400000},
	{0x7f7f, 0x7f7f0000}, {0x0001, 0x00010000}, {0x8001, 0x80010000}, {0x0080, 0x00800000},
	{0x7f80, 0x7f800000}, {0xff80, 0xff800000}, {0x7fc0, 0x7fc00000}, {0x7f81, 0x7f810000},
};

bool matches16(uint16_t got, uint16_t want, bool (*is_nan)(uint16_t))
{
	return is_nan(want) ? is_nan(got) : got == want;
}

bool matches32(uint32_t got, uint32_t want)
{
	return is_f32_nan(want) ? is_f32_nan(got) : got == want;
}

// The array forms convert eight values at a time where the CPU has F16C and the rest one by one,
// so each row is checked three ways: the scalar form, the array form over the table with every
// row repeated eight times (all of it in whole blocks), and the array form on the row alone.
constexpr size_t block = 8;

// Checks one narrowing table the three ways.
template <size_t N>
void check_narrowing(const Narrowing (&table)[N], uint16_t (*scalar)(float),
		     void (*array)(const float*, uint16_t*, size_t), bool (*is_nan)(uint16_t))
{
	std::vector<float> in;
	for (const Narrowing& row : table)
		in.insert(in.end(), block, std::bit_cast<float>(row.f32));
	std::vector<uint16_t> blocks(in.size());
	array(in.data(), blocks.data(), in.size());
	for (size_t i = 0; i < N; ++i) {
		const float x = in[i * block];
		const uint16_t one = scalar(x);
		uint16_t alone = 0;
		array(&x, &alone, 1);
		INFO(fmt::format("f32 0x{:08x} should give 0x{:04x}; scalar 0x{:04x}, in a block 0x{:04x}, alone 0x{:04x}",
				 table[i].f32, table[i].want, one, blocks[i * block], alone));
		CHECK(matches16(one, table[i].want, is_nan));
		for (size_t k = 0; k < block; ++k)
			CHECK(matches16(blocks[i * block + k], table[i].want, is_nan));
		CHECK(matches16(alone, table[i].want, is_nan));
	}
}

template <size_t N>
void check_widening(const Widening (&table)[N], float (*scalar)(uint16_t), void (*array)(const uint16_t*, float*, size_t))
{
	std::vector<uint16_t> in;
	for (const Widening& row : table)
		in.insert(in.end(), block, row.half);
	std::vector<float> blocks(in.size());
	array(in.data(), blocks.data(), in.size());
	for (size_t i = 0; i < N; ++i) {
		const uint16_t h = in[i * block];
		const uint32_t one = std::bit_cast<uint32_t>(scalar(h));
		float alone = 0;
		array(&h, &alone, 1);
		const uint32_t alone_bits = std::bit_cast<uint32_t>(alone);
		INFO(fmt::format("0x{:04x} should give f32 0x{:08x}; scalar 0x{:08x}, in a block 0x{:08x}, alone 0x{:08x}",
				 table[i].half, table[i].want, one, std::bit_cast<uint32_t>(blocks[i * block]), alone_bits));
		CHECK(matches32(one, table[i].want));
		for (size_t k = 0; k < block; ++k)
			CHECK(matches32(std::bit_cast<uint32_t>(blocks[i * block + k]), table[i].want));
		CHECK(matches32(alone_bits, table[i].want));
	}
}

} // namespace

TEST_CASE("f32 to f16 and bf16 give the hand-derived bits: ties to even, inf past the range, NaN kept")
{
	SUBCASE("f16") { check_narrowing(f16_table, f32_to_f16, narrow_f16, is_f16_nan); }
	SUBCASE("bf16") { check_narrowing(bf16_table, f32_to_bf16, narrow_bf16, is_bf16_nan); }
}

TEST_CASE("f16 and bf16 widen to the hand-derived f32 bits")
{
	SUBCASE("f16") { check_widening(f16_widen_table, f16_to_f32, widen_f16); }
	SUBCASE("bf16") { check_widening(bf16_widen_table, bf16_to_f32, widen_bf16); }
}

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

// Where the CPU has AVX512-BF16, narrow_bf16 is its instruction, separate code from the portable
// loop: they must agree on every kind of input, subnormals (which the instruction alone would
// flush) mixed into the same 16-value vector as normal values included.
TEST_CASE("narrow_bf16 gives narrow_bf16_portable's bits: ties, neighbours, subnormals, inf and NaN")
{
	const std::string path = bf16_narrowing_is_native() ? "this CPU narrows to bf16 with AVX512-BF16; checked against the portable loop"
					   : "this CPU has no AVX512-BF16: narrow_bf16 is the portable loop here";
	MESSAGE(path);
	std::vector<uint32_t> bits;
	for (uint32_t high = 0; high < 0x10000; high += 3) // around every third bf16 value, both signs
		for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
			bits.push_back(high << 16 | low);
	std::mt19937 gen(11);
	for (int i = 0; i < 100000; ++i)
		bits.push_back(static_cast<uint32_t>(gen()));
	for (int i = 0; i < 64; ++i) // whole vectors of subnormals, and a lone one among normal values
		bits.push_back(static_cast<uint32_t>(gen()) & 0x807fffffu);
	bits.insert(bits.end(), {0x3f800000u, 0x00000001u, 0x3f808000u, 0x80400000u});
	const auto in = std::bit_cast<const float*>(bits.data());
	std::vector<uint16_t> got(bits.size()), want(bits.size());
	for (size_t offset : {size_t{0}, size_t{5}}) { // aligned to the vector and not, with a tail
		const size_t n = bits.size() - offset;
		narrow_bf16(in + offset, got.data(), n);
		narrow_bf16_portable(in + offset, want.data(), n);
		size_t wrong = 0;
		for (size_t i = 0; i < n; ++i)
			wrong += (got[i] == want[i] || (is_bf16_nan(got[i]) && is_bf16_nan(want[i]))) ? 0 : 1;
		CHECK(wrong == 0);
	}
}

// The F16C path of narrow_f16 is separate code from f32_to_f16, so agreeing on many inputs means
// something.
TEST_CASE("narrow_f16 equals f32_to_f16, rounding ties to even")
{
	const auto in = awkward_floats();
	std::vector<uint16_t> h(in.size());
	narrow_f16(in.data(), h.data(), in.size());
	size_t wrong = 0;
	for (size_t i = 0; i < in.size(); ++i) {
		const uint16_t sh = f32_to_f16(in[i]);
		wrong += (h[i] == sh || (is_f16_nan(h[i]) && is_f16_nan(sh))) ? 0 : 1;
	}
	CHECK(wrong == 0);
}
