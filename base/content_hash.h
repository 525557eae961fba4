// A fast 64-bit hash of a byte range, for telling data sets apart (not for security).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tower {

// Four independent multiply-rotate lanes over 8-byte words, folded at the end: several GB/s on
// one core, so a 200 MB training set costs tens of milliseconds. Equal on every rank for equal bytes.
uint64_t content_hash(const void* data, size_t bytes, uint64_t seed = 0);

} // namespace tower
