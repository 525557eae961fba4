// CRC32C (Castagnoli), the checksum of checkpoint files.
#include "base/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace tower {

namespace {

constexpr uint32_t reflected_polynomial = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table()
{
	std::array<uint32_t, 256> table{};
	for (uint32_t i = 0; i < 256; ++i) {
		uint32_t c = i;
		for (int k = 0; k < 8; ++k)
			c = (c & 1) ? (c >> 1) ^ reflected_polynomial : c >> 1;
		table[i] = c;
	}
	return table;
}

constexpr std::array<uint32_t, 256> table = make_table();

} // namespace

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc)
{
	const auto* p = static_cast<const unsigned char*>(data);
	uint32_t c = ~crc;
	for (size_t i = 0; i < size; ++i)
		c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
	return ~c;
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc)
{
#if defined(__SSE4_2__)
	const auto* p = static_cast<const unsigned char*>(data);
	uint64_t c = ~crc;
	for (; size >= 8; size -= 8, p += 8) {
		uint64_t word = 0;
		std::memcpy(&word, p, 8);
		c = _mm_crc32_u64(c, word);
	}
	auto c32 = static_cast<uint32_t>(c);
	for (; size > 0; --size, ++p)
		c32 = _mm_crc32_u8(c32, *p);
	return ~c32;
#else
	return crc32c_portable(data, size, crc);
#endif
}

} // namespace tower
