// Where the strategies with variable owners (parameter-server, async, sync-replicas) keep each
// variable: slices of large variables, each placed on the least-loaded owner by bytes.
#include "runtime/strategies/placement.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"

namespace tower {

namespace {

// Slices start on 64-byte boundaries of f32 elements where the variable allows.
constexpr int64_t slice_granule = 16;

int64_t largest_slice(int64_t total, size_t owners)
{
	if (owners < 2)
		return std::max<int64_t>(total, 1);
	const int64_t eighth_of_share = (total + 8 * static_cast<int64_t>(owners) - 1) / (8 * static_cast<int64_t>(owners));
	return std::max<int64_t>(slice_granule, (eighth_of_share + slice_granule - 1) / slice_granule * slice_granule);
}

std::vector<VariableSlice> cut(const std::vector<VariableSize>& variables, int64_t max_slice)
{
	std::vector<VariableSlice> slices;
	for (size_t v = 0; v < variables.size(); ++v) {
		const int64_t count = variables[v].count;
		const int64_t pieces = std::max<int64_t>(1, (count + max_slice - 1) / max_slice);
		for (int64_t p = 0; p < pieces; ++p) {
			// Nearly equal pieces, cut on the granule where the variable is large enough.
			int64_t begin = count * p / pieces, end = count * (p + 1) / pieces;
			if (pieces > 1 && count / pieces >= 4 * slice_granule) {
				begin = p == 0 ? 0 : begin / slice_granule * slice_granule;
				end = p + 1 == pieces ? count : end / slice_granule * slice_granule;
			}
			VariableSlice s;
			s.variable = v;
			s.offset = begin;
			s.count = end - begin;
			s.name = pieces == 1 ? variables[v].name : fmt::format("{}[{}:{}]", variables[v].name, begin, end);
			slices.push_back(s);
		}
	}
	return slices;
}

} // namespace

Placement place_variables(const std::vector<VariableSize>& variables, const std::vector<int>& owners)
{
	TOWER_CHECK(!owners.empty(), "placing {} variables on no owner", variables.size());
	Placement placement;
	placement.owners = owners;
	int64_t total = 0;
	for (const VariableSize& v : variables)
		total += v.count;
	placement.max_slice = largest_slice(total, owners.size());
	placement.slices = cut(variables, placement.max_slice);
	placement.owner_elements.assign(owners.size(), 0);
	for (VariableSlice& s : placement.slices) {
		const auto least = std::min_element(placement.owner_elements.begin(), placement.owner_elements.end());
		s.owner = static_cast<int>(least - placement.owner_elements.begin());
		s.segment_offset = *least;
		*least += s.count;
	}
	return placement;
}

nlohmann::json Placement::to_json() const
{
	nlohmann::json out = nlohmann::json::array();
	for (size_t o = 0; o < owners.size(); ++o) {
		nlohmann::json held = nlohmann::json::array();
		for (const VariableSlice& s : slices)
			if (s.owner == static_cast<int>(o))
				held.push_back(s.name);
		out.push_back({{"rank", owners[o]}, {"bytes", owner_elements[o] * 4}, {"variables", held}});
	}
	return out;
}

std::string Placement::describe() const
{
	int64_t total = 0;
	for (int64_t e : owner_elements)
		total += e;
	std::string text;
	for (size_t o = 0; o < owners.size(); ++o) {
		std::vector<std::string> held;
		for (const VariableSlice& s : slices)
			if (s.owner == static_cast<int>(o))
				held.push_back(s.name);
		text += fmt::format("  rank {}: {:.2f} MB ({:.1f}%): {}\n", owners[o],
				    static_cast<double>(owner_elements[o]) * 4 / 1e6,
				    total ? 100.0 * static_cast<double>(owner_elements[o]) / static_cast<double>(total) : 0.0,
				    fmt::join(held, ", "));
	}
	return text;
}

} // namespace tower
