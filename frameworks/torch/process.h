// The MPI world of a PyTorch program: made once by init(), ended by shutdown() (tower.torch.init).
#pragma once

#include <mpi.h>

#include "base/mpi/topology.h"

namespace tower {
class Communicator;
}

namespace tower::torch_adapter {

// Starts MPI (unless the program already did, e.g. through mpi4py) and learns the topology:
// nodes are the ranks that share memory, or TOWER_RANKS_PER_NODE consecutive ranks. Idempotent.
void init();
// Ends what init() started; MPI itself only if init() started it. Idempotent; init() may not
// be called again afterwards (MPI cannot be restarted).
void shutdown();
bool is_initialized();

// The process's topology and a communicator on host memory for a program's own tensors. Throw
// tower::Error naming tower.torch.init() before init() or after shutdown().
const Topology& topology();
Communicator& host_communicator();
// A communicator of its own for the adapter's per-step bookkeeping, apart from the program's.
MPI_Comm private_comm();

} // namespace tower::torch_adapter
