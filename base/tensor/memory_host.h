// Host-side memory operations shared by the CPU-only and CUDA builds.
#pragma once

#include <cstddef>

namespace tower {

void* host_alloc(size_t bytes);
void host_free(void* pointer) noexcept;
// How many host_alloc calls have returned memory in this process (any thread): what the tests read
// to check that a steady step allocates nothing.
size_t host_allocations();
// The process's peak resident set size.
size_t host_peak_rss_bytes();

} // namespace tower
