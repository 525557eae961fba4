// Host-side memory operations shared by the CPU-only and CUDA builds.
#include "runtime/memory_host.h"

#include <cstdlib>
#include <cstring>

#include "runtime/error.h"

namespace tower {

void* host_alloc(size_t bytes)
{
	if (bytes == 0)
		return nullptr;
	constexpr size_t alignment = 64;
	const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
	void* p = std::aligned_alloc(alignment, rounded);
	if (!p)
		throw Error(fmt::format("out of host memory allocating {} bytes", bytes));
	return p;
}

void host_free(void* pointer) noexcept
{
	std::free(pointer);
}

} // namespace tower
