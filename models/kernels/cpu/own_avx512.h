// Whether tower's own AVX-512 loops (beside oneDNN's kernels) may run on this CPU.
#pragma once

namespace tower {

// The CPU has AVX-512F and ONEDNN_MAX_CPU_ISA (or its older name DNNL_MAX_CPU_ISA) does not hold
// oneDNN below AVX-512: the cap holds tower's own loops too, so a test capped at AVX2 runs the
// loops an AVX2-only CPU runs.
bool own_avx512_allowed();

} // namespace tower
