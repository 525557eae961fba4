// One interface for collective operations on a buffer, with the backend chosen by the buffer's device.
#pragma once

#include <cstddef>
#include <memory>

#include <mpi.h>

#include "collectives/reduce_op.h"
#include "base/device/device.h"
#include "base/tensor/dtype.h"

namespace tower {

// Every call is collective over the communicator's ranks, which must pass the same counts, dtype,
// op and root. Counts are elements (64-bit); 0 is allowed. Buffers live on device().
class Communicator {
public:
	virtual ~Communicator() = default;

	virtual int rank() const = 0;
	virtual int size() const = 0;
	virtual const Device& device() const = 0;

	// recv[i] = op over ranks of send[i]; recv may equal send (in place).
	virtual void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) = 0;
	// send holds size() blocks of `count`; this rank receives the reduction of block rank().
	// send and recv must not overlap.
	virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) = 0;
	// send holds `count`; recv receives size() blocks, rank r's at r * count. No overlap.
	virtual void all_gather(const void* send, void* recv, size_t count, DType dtype) = 0;
	// data on `root` is copied to data on every rank.
	virtual void broadcast(void* data, size_t count, DType dtype, int root) = 0;
	virtual void barrier() = 0;
};

// Collective over `comm`, which is duplicated (the communicator never uses `comm` itself, so
// another thread may keep using it). Host buffers get the MPI backend; CUDA buffers get NCCL,
// or a tower::Error in a build without CUDA.
std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, const Device& device);

} // namespace tower
