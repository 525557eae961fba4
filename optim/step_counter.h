// The optimizer's step counter: an i64 [1] tensor kept with the rest of its state.
#pragma once

#include <cstdint>

#include "base/tensor/named_tensor.h"

namespace tower {

// "optimizer/step", zero, on `device`.
NamedTensor make_step_counter(const Device& device);

// Reads the counter back to the host (waits for queued device work).
int64_t read_step_counter(const NamedTensor& counter);

} // namespace tower
