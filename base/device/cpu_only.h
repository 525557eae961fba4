// The CPU-only build's stand-ins for CUDA code: a clear error where a GPU device reaches them.
#pragma once

#include "base/device/device.h"

namespace tower {

// Throws tower::Error naming `device` and how to rebuild when it is a CUDA device (defined only in
// a build without CUDA).
void require_cpu_build(const Device& device);

} // namespace tower
