// The MPI world of a PyTorch program: made once by init(), ended by shutdown() (tower.torch.init).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <mpi.h>

#include "base/mpi/topology.h"

namespace tower {
class TensorCollectives;
}

namespace tower::torch_adapter {

// Starts MPI (unless the program already did, e.g. through mpi4py) and learns the topology:
// nodes are the ranks that share memory, or TOWER_RANKS_PER_NODE consecutive ranks. Idempotent.
void init();
// Collective: records a timeline (runtime/observe/timeline.h) into PATH until shutdown(): the
// buckets' all-reduces, the waits for them, the updates.
void record_timeline(const std::string& path);
// Collective: closes every open reducer and Checkpoints (in the order they were made, alike on
// every rank), then
// ends what init() started; MPI itself only if init() started it. Idempotent; init() may not be
// called again afterwards (MPI cannot be restarted).
void shutdown();
// What shutdown() must close before MPI ends, in the order added: returns a key for
// remove_closer(). A reducer or a Checkpoints adds itself when made and removes itself when closed.
uint64_t add_closer(std::function<void()> close);
void remove_closer(uint64_t key);
// Ends the job now, on every rank (MPI_Abort): what a rank does when it fails alone, since the
// others may be waiting for it in a collective.
[[noreturn]] void abort_job(int code);
bool is_initialized();

// The process's topology and the collectives on a program's own CPU tensors. Throw tower::Error
// naming tower.torch.init() before init() or after shutdown().
const Topology& topology();
TensorCollectives& tensor_collectives();
// A communicator of its own for the adapter's per-step bookkeeping, apart from the program's.
MPI_Comm private_comm();

} // namespace tower::torch_adapter
