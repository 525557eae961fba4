// Least-loaded placement of variable slices: balance, coverage and determinism.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "runtime/strategies/placement.h"

using namespace tower;

namespace {

// The default MLP: 784 -> 1024 -> 1024 -> 10; fc2.weight alone is 56% of it.
std::vector<VariableSize> default_mlp()
{
	return {{"fc1.weight", 784 * 1024}, {"fc1.bias", 1024}, {"fc2.weight", 1024 * 1024},
		{"fc2.bias", 1024},         {"fc3.weight", 1024 * 10}, {"fc3.bias", 10}};
}

std::vector<int> ranks(int n)
{
	std::vector<int> r(static_cast<size_t>(n));
	std::iota(r.begin(), r.end(), 0);
	return r;
}

} // namespace

TEST_CASE("slices cover every variable exactly once and owners hold what they were given")
{
	const auto variables = default_mlp();
	for (int owners : {1, 2, 3, 4, 7}) {
		CAPTURE(owners);
		const Placement p = place_variables(variables, ranks(owners));
		std::vector<int64_t> covered(variables.size(), 0), held(static_cast<size_t>(owners), 0);
		for (size_t i = 0; i < p.slices.size(); ++i) {
			const VariableSlice& s = p.slices[i];
			REQUIRE(s.count > 0);
			if (i > 0 && p.slices[i - 1].variable == s.variable)
				CHECK(p.slices[i - 1].offset + p.slices[i - 1].count == s.offset);
			else
				CHECK(s.offset == 0);
			covered[s.variable] += s.count;
			CHECK(s.segment_offset == held[static_cast<size_t>(s.owner)]);
			held[static_cast<size_t>(s.owner)] += s.count;
		}
		for (size_t v = 0; v < variables.size(); ++v)
			CHECK(covered[v] == variables[v].count);
		CHECK(held == p.owner_elements);
	}
}

TEST_CASE("the largest owner holds at most 1.15 times an even share of the default MLP")
{
	const auto variables = default_mlp();
	int64_t total = 0;
	for (const auto& v : variables)
		total += v.count;
	for (int owners : {2, 3, 4}) {
		CAPTURE(owners);
		const Placement p = place_variables(variables, ranks(owners));
		const int64_t largest = *std::max_element(p.owner_elements.begin(), p.owner_elements.end());
		CHECK(static_cast<double>(largest) <= 1.15 * static_cast<double>(total) / owners);
	}
}

TEST_CASE("whole variables go to the least-loaded owner in order, lowest index on a tie")
{
	// Below the smallest slice (16 elements), nothing is cut: whole variables are placed.
	const std::vector<VariableSize> variables = {{"a", 2}, {"b", 1}, {"c", 1}, {"d", 2}};
	const Placement p = place_variables(variables, {5, 9});
	REQUIRE(p.slices.size() == 4);
	CHECK(p.slices[0].owner == 0); // tie: lowest index
	CHECK(p.slices[1].owner == 1); // 2 vs 0
	CHECK(p.slices[2].owner == 1); // 2 vs 1
	CHECK(p.slices[3].owner == 0); // 2 vs 2: tie
	CHECK(p.owners == std::vector<int>{5, 9});
	CHECK(p.to_json()[1]["rank"] == 9);
}

TEST_CASE("placement is the same every time")
{
	const auto a = place_variables(default_mlp(), ranks(3));
	const auto b = place_variables(default_mlp(), ranks(3));
	CHECK(a.to_json() == b.to_json());
}
