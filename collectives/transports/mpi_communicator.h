// The MPI backend of Communicator: host buffers, 64-bit counts sent in int-sized pieces.
#pragma once

#include "collectives/transports/communicator.h"
#include "collectives/transports/mpi_reduce_ops.h"
#include "base/mpi/topology.h"

namespace tower {

class MpiCommunicator final : public Communicator {
public:
	// Collective over `comm`; works on a private duplicate of it.
	explicit MpiCommunicator(MPI_Comm comm);

	int rank() const override { return rank_; }
	int size() const override { return size_; }
	const Device& device() const override { return device_; }
	MPI_Comm comm() const { return comm_.get(); }

	void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
	void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
	void all_gather(const void* send, void* recv, size_t count, DType dtype) override;
	void broadcast(void* data, size_t count, DType dtype, int root) override;
	void barrier() override;

private:
	CommHandle comm_;
	int rank_ = 0, size_ = 1;
	Device device_;
	MpiReduceOps ops_;
};

} // namespace tower
