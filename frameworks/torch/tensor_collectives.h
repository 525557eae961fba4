// Collectives on a PyTorch program's own CPU tensors (Horovod's allreduce, broadcast, allgather).
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "collectives/reduce_op.h"

namespace tower::torch_adapter {

// Every call is collective over all ranks, which must make the same calls in the same order
// (Horovod matches them by name; tower by order). Before moving data, the ranks compare what
// each called (operation, name, dtype, shape, op, root): any difference is a tower::AgreedError
// on every rank naming each rank's call, never a hang. Tensors must be on the CPU; float32,
// float64, float16, bfloat16, int32 and int64 are supported.

// A new tensor holding the reduction over ranks (sum, mean, max or min).
at::Tensor allreduce(const at::Tensor& tensor, ReduceOp op, const std::string& name);
// The reduction, written into `tensor`.
void allreduce_(const at::Tensor& tensor, ReduceOp op, const std::string& name);
// Root's values, into `tensor` on every rank.
void broadcast_(const at::Tensor& tensor, int root, const std::string& name);
// Every rank's tensor concatenated along the first dimension, in rank order; the first
// dimension may differ between ranks, the others may not.
at::Tensor allgather(const at::Tensor& tensor, const std::string& name);
void barrier();

} // namespace tower::torch_adapter
