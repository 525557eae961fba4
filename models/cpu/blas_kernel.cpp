// Picks OpenBLAS's widest kernel set on CPUs that its own detection does not know.
#include "models/cpu/blas_kernel.h"

#include <cstdlib>
#include <unistd.h>

#include <cblas.h>

namespace tower {

namespace {

bool is_avx512_kernel(const std::string& name)
{
	return name == "SkylakeX" || name == "Cooperlake" || name == "SapphireRapids";
}

bool cpu_has_avx512()
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

} // namespace

std::string blas_kernel_name()
{
	const char* name = openblas_get_corename();
	return name != nullptr ? name : "unknown";
}

std::string preferred_blas_coretype()
{
	if (!cpu_has_avx512() || is_avx512_kernel(blas_kernel_name()))
		return "";
	// Cooperlake adds the AVX512-BF16 kernels on top of SkylakeX's sgemm.
	return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
}

void reexec_with_preferred_blas_kernel(char** argv)
{
	if (std::getenv("OPENBLAS_CORETYPE") != nullptr)
		return;
	const std::string coretype = preferred_blas_coretype();
	if (coretype.empty())
		return;
	setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1);
	execv("/proc/self/exe", argv);
	// The exec failed (no /proc, say): carry on with the kernels already loaded.
	unsetenv("OPENBLAS_CORETYPE");
}

} // namespace tower
