// Applies the update formulas to whole tensors on the device that holds them.
#pragma once

#include <cstdint>

#include "optim/update_rules.h"
#include "base/device/device.h"

namespace tower {

// Each call updates `n` elements on `device` (the CPU, or a CUDA device in a CUDA build) and
// returns once the work is queued; CUDA work runs in order on the calling thread's stream.
void sgd_update(const Device& device, float* p, const float* g, int64_t n, const SgdCoeffs& c);
void momentum_update(const Device& device, float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c);
// `step` points to the i64 step counter on `device`, already advanced to this step (1-based).
void adam_update(const Device& device, float* p, const float* g, float* m, float* v, int64_t n,
		 const int64_t* step, const AdamCoeffs& c);
// Adds one to the step counter on `device`.
void advance_step(const Device& device, int64_t* step);

// The CPU and CUDA implementations the functions above choose between.
void sgd_update_cpu(float* p, const float* g, int64_t n, const SgdCoeffs& c);
void momentum_update_cpu(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c);
void adam_update_cpu(float* p, const float* g, float* m, float* v, int64_t n, int64_t step, const AdamCoeffs& c);

void sgd_update_cuda(float* p, const float* g, int64_t n, const SgdCoeffs& c);
void momentum_update_cuda(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c);
void adam_update_cuda(float* p, const float* g, float* m, float* v, int64_t n, const int64_t* step, const AdamCoeffs& c);
void advance_step_cuda(int64_t* step);

} // namespace tower
