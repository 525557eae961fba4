// Which OpenBLAS kernel set this process uses, and a re-launch that picks the widest one.
#pragma once

#include <string>

namespace tower {

// The kernel set OpenBLAS chose at load time ("Haswell", "SkylakeX", ...).
std::string blas_kernel_name();

// The OPENBLAS_CORETYPE this CPU should use, or "" when OpenBLAS's own choice is already the
// widest the CPU supports. OpenBLAS releases that predate a CPU model fall back to an AVX2
// kernel set on AVX-512 parts (Sapphire Rapids under 0.3.21, say), losing about a third of
// sgemm's speed.
std::string preferred_blas_coretype();

// When preferred_blas_coretype() names a kernel set, sets OPENBLAS_CORETYPE and re-executes
// this program with the same arguments: OpenBLAS reads the variable only while it loads, before
// main. Does nothing when OPENBLAS_CORETYPE is already set (the user's choice wins, and a
// second pass never loops), or when the exec fails. Call first thing in main, before MPI_Init.
void reexec_with_preferred_blas_kernel(char** argv);

} // namespace tower
