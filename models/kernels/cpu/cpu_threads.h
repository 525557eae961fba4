// How many threads the CPU backend's oneDNN kernels use in this process.
#pragma once

namespace tower {

// One per rank by default, since the ranks of a job already fill the cores; OMP_NUM_THREADS,
// when set, is the default instead. Throws tower::Error for n < 1.
void set_cpu_threads(int n);
int cpu_threads();

// The oneDNN library version ("2.6.3") and the instruction set its kernels use on this CPU
// ("avx512_core_bf16"; ONEDNN_MAX_CPU_ISA can lower it).
const char* onednn_version();
const char* onednn_isa();

} // namespace tower
