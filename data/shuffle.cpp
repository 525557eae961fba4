// A small deterministic generator (splitmix64) and the per-epoch permutation built from it.
#include "data/shuffle.h"

#include <cstddef>
#include <numeric>
#include <utility>

namespace tower {

uint64_t SplitMix64::next()
{
	state_ += 0x9e3779b97f4a7c15ULL;
	uint64_t z = state_;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t bound)
{
	// Values under 2^64 mod bound would make the low residues likelier; draw again instead.
	const uint64_t reject_under = (0 - bound) % bound;
	uint64_t r = next();
	while (r < reject_under)
		r = next();
	return r % bound;
}

std::vector<int64_t> epoch_permutation(int64_t count, uint64_t seed, int64_t epoch)
{
	// Mixing the seed first keeps (seed, epoch) and (seed + 1, epoch - 1) apart.
	SplitMix64 mixer(seed);
	SplitMix64 rng(mixer.next() ^ (static_cast<uint64_t>(epoch) * 0xd1b54a32d192ed03ULL));
	std::vector<int64_t> order(static_cast<size_t>(count));
	std::iota(order.begin(), order.end(), int64_t{0});
	for (int64_t i = count - 1; i > 0; --i) {
		const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
		std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
	}
	return order;
}

} // namespace tower
