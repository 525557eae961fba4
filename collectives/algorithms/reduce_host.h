// Element-wise reductions of host buffers, the inner loops of the CPU collectives.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/reduce_op.h"
#include "base/tensor/dtype.h"

namespace tower {

// out[i] = op(ins[0][i], ..., ins[n-1][i]) for i < count. `out` may alias any input. mean is
// reduced as a sum here (see divide_host). f16 and bf16 are accumulated in f32 and rounded once.
void reduce_host(void* out, const void* const* ins, size_t n_inputs, size_t count, DType dtype, ReduceOp op);

// data[i] /= divisor: the last step of a mean.
void divide_host(void* data, size_t count, DType dtype, int64_t divisor);

} // namespace tower
