// A small deterministic generator (splitmix64) and the per-epoch permutation built from it, so
// sample order depends only on (seed, epoch), never on the standard library.
#pragma once

#include <cstdint>
#include <vector>

namespace tower {

class SplitMix64 {
public:
	explicit SplitMix64(uint64_t seed) : state_(seed) {}

	uint64_t next();
	// Uniform in [0, bound) without modulo bias; bound must be positive.
	uint64_t below(uint64_t bound);

private:
	uint64_t state_;
};

// A Fisher-Yates permutation of 0..count-1 determined by (seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t count, uint64_t seed, int64_t epoch);

} // namespace tower
