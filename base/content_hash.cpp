// A fast 64-bit hash of a byte range, for telling data sets apart (not for security).
#include "base/content_hash.h"

#include <cstring>

namespace tower {

namespace {

constexpr uint64_t k1 = 0x9e3779b185ebca87ull, k2 = 0xc2b2ae3d27d4eb4full, k3 = 0x165667b19e3779f9ull;

uint64_t rotl(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

uint64_t mix(uint64_t lane, uint64_t word)
{
	return rotl(lane + word * k2, 31) * k1;
}

uint64_t word_at(const unsigned char* p)
{
	uint64_t w;
	std::memcpy(&w, p, 8);
	return w;
}

} // namespace

uint64_t content_hash(const void* data, size_t bytes, uint64_t seed)
{
	const auto* p = static_cast<const unsigned char*>(data);
	uint64_t lanes[4] = {seed + k1 + k2, seed + k2, seed, seed - k1};
	size_t at = 0;
	for (; at + 32 <= bytes; at += 32)
		for (int l = 0; l < 4; ++l)
			lanes[l] = mix(lanes[l], word_at(p + at + 8 * l));
	uint64_t h = rotl(lanes[0], 1) + rotl(lanes[1], 7) + rotl(lanes[2], 12) + rotl(lanes[3], 18);
	for (; at + 8 <= bytes; at += 8)
		h = rotl(h ^ mix(0, word_at(p + at)), 27) * k1 + k3;
	for (; at < bytes; ++at)
		h = rotl(h ^ (p[at] * k3), 11) * k1;
	h ^= bytes;
	h ^= h >> 33;
	h *= k2;
	h ^= h >> 29;
	h *= k3;
	return h ^ (h >> 32);
}

} // namespace tower
