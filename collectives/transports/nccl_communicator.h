// The NCCL backend of Communicator, for buffers in CUDA device memory.
#pragma once

#include <memory>

#include <mpi.h>

#include "collectives/transports/communicator.h"

namespace tower {

// Collective over `comm`: rank 0 creates the NCCL unique id, MPI_Bcast carries it (on a private
// duplicate of `comm`), every rank joins with ncclCommInitRank on `device`. Calls may come from
// any host thread (each selects `device`), run on one communication stream after all work queued
// so far on the calling thread's stream (thread_stream(), which wrote their inputs), and return
// when the result is in place; NCCL's asynchronous errors are polled while waiting, and a failed
// collective ends the job through fatal() (MPI_Abort). While an exception unwinds the communicator
// is neither destroyed nor aborted: it is left to the process's end. A build without CUDA throws
// tower::Error saying so.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const Device& device);

} // namespace tower
