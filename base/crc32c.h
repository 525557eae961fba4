// CRC32C (Castagnoli), the checksum of checkpoint files.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tower {

// Extends `crc` (0 to start) over `size` bytes at `data`: crc32c(b, crc32c(a)) == crc32c(a + b).
// Uses the SSE4.2 crc32 instruction where the build targets it (x86-64-v3 does), a table otherwise.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The table version alone, so tests can check both give the same sums.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

} // namespace tower
