// Whether tower's own AVX-512 loops may run: the CPU's features and oneDNN's ISA cap.
#include "models/kernels/cpu/own_avx512.h"

#include <strings.h>

#include <cstdlib>
#include <initializer_list>

namespace tower {

#if defined(__x86_64__) && defined(__GNUC__)

namespace {

bool isa_capped_below_avx512()
{
	for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
		const char* cap = std::getenv(name);
		if (cap != nullptr && *cap != '\0')
			return (strncasecmp(cap, "SSE", 3) == 0 || strncasecmp(cap, "AVX", 3) == 0) &&
			       strncasecmp(cap, "AVX512", 6) != 0;
	}
	return false;
}

} // namespace

bool own_avx512_allowed()
{
	static const bool allowed = __builtin_cpu_supports("avx512f") && !isa_capped_below_avx512();
	return allowed;
}

#else // not x86-64: no AVX-512

bool own_avx512_allowed()
{
	return false;
}

#endif

} // namespace tower
