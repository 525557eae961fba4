// Post-init broadcast of the root's (by default rank 0's) named tensors, guarded by a signature
// check across ranks.
#pragma once

#include <vector>

#include "base/tensor/named_tensor.h"
#include "base/mpi/topology.h"

namespace tower {

// Collective over the topology's world (on a private duplicate). First every rank compares its
// list's signature (names, shapes, dtypes, order) with root's; any difference throws
// tower::AgreedError on every rank naming the differing entries, before any data moves. Then
// root's contents are copied into every rank's tensors (host tensors by MPI, device ones by NCCL).
void broadcast_named(const Topology& topology, std::vector<NamedTensor>& tensors, int root = 0);

} // namespace tower
