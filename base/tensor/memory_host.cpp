// Host-side memory operations shared by the CPU-only and CUDA builds.
#include "base/tensor/memory_host.h"

#include <sys/resource.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace tower {

namespace {

std::atomic<size_t> allocations{0};

} // namespace

void* host_alloc(size_t bytes)
{
	if (bytes == 0)
		return nullptr;
	constexpr size_t alignment = 64;
	const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
	void* p = std::aligned_alloc(alignment, rounded);
	if (!p)
		throw Error(fmt::format("out of host memory allocating {} bytes", bytes));
	allocations.fetch_add(1, std::memory_order_relaxed);
	return p;
}

void host_free(void* pointer) noexcept
{
	std::free(pointer);
}

size_t host_allocations()
{
	return allocations.load(std::memory_order_relaxed);
}

size_t host_peak_rss_bytes()
{
	rusage usage{};
	getrusage(RUSAGE_SELF, &usage);
	return static_cast<size_t>(usage.ru_maxrss) * 1024; // Linux reports kilobytes
}

} // namespace tower
