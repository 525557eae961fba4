// Where the strategies with variable owners (parameter-server, async, sync-replicas) keep each
// variable: slices of large variables, each placed on the least-loaded owner by bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tower {

struct VariableSlice {
	std::string name;           // "fc1.bias", or "fc2.weight[0:131072]" for a slice
	size_t variable = 0;        // index in the variable list
	int64_t offset = 0;         // first element of the variable in this slice
	int64_t count = 0;          // elements
	int owner = 0;              // index into Placement::owners
	int64_t segment_offset = 0; // elements before it in its owner's segment
};

struct Placement {
	std::vector<int> owners;             // the world ranks that hold variables
	std::vector<VariableSlice> slices;   // in variable order, then offset order
	std::vector<int64_t> owner_elements; // per owner: elements it holds
	int64_t max_slice = 0;               // elements; variables above it were split

	nlohmann::json to_json() const;
	// One line per owner: its rank, its share, and what it holds.
	std::string describe() const;
};

struct VariableSize {
	std::string name;
	int64_t count = 0;
};

// Deterministic on every rank. With more than one owner, variables larger than an eighth of an
// even share are cut into nearly equal slices no larger than that, so a model with one dominant
// tensor still balances: the largest owner then holds at most 1.125 times an even share. Each
// slice, in variable order, goes to the owner holding the fewest elements so far (the lowest
// index on a tie), as a least-loaded device setter places whole variables.
Placement place_variables(const std::vector<VariableSize>& variables, const std::vector<int>& owners);

} // namespace tower
