// The NCCL backend of Communicator, for buffers in CUDA device memory.
#pragma once

#include <memory>

#include <mpi.h>

#include "collectives/communicator.h"

namespace tower {

// Collective over `comm`: rank 0 creates the NCCL unique id, MPI_Bcast carries it (on a private
// duplicate of `comm`), every rank joins with ncclCommInitRank on `device`. Calls run on one
// communication stream and return when the result is in place; NCCL's asynchronous errors are
// polled while waiting, and a failed communicator is aborted with a tower::Error. A build
// without CUDA throws tower::Error saying so.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const Device& device);

} // namespace tower
