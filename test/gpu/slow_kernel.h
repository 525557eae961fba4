// A deliberately slow producer kernel for GPU tests of stream ordering.
#pragma once

#include <cstddef>

namespace tower::test {

// Queues on the current device's default stream a kernel that waits about `milliseconds` and
// then writes data[i] = first + i * step for i < count; returns at once (the launch error, if any,
// as a cudaError_t value cast to int). A consumer that is not ordered after it reads the old values.
int launch_slow_fill(float* data, size_t count, float first, float step, int milliseconds);

} // namespace tower::test
