// Launchers of the CUDA update kernels. They return the launch status instead of throwing
// because nvcc cannot compile the fmt-based error helpers; update_cuda.cpp checks it.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "optim/update_rules.h"

namespace tower {

cudaError_t launch_sgd_update(float* p, const float* g, int64_t n, const SgdCoeffs& c);
cudaError_t launch_momentum_update(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c);
cudaError_t launch_adam_update(float* p, const float* g, float* m, float* v, int64_t n, const int64_t* step,
			       const AdamCoeffs& c);
cudaError_t launch_advance_step(int64_t* step);

} // namespace tower
