// The naive all-reduce: MPI_Allreduce on host memory, through a host copy for device buffers.
#pragma once

#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/transports/mpi_communicator.h"

namespace tower {

// The baseline the benchmark prints beside the other modes: whatever the MPI library does.
class NaiveAllReduce final : public AllReduce {
public:
	// Collective over `comm` (duplicated); buffers live on `device`.
	NaiveAllReduce(MPI_Comm comm, const Device& device);

	AllReduceMode mode() const override { return AllReduceMode::naive; }
	int group_size() const override { return comm_.size(); }
	void run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;

private:
	MpiCommunicator comm_;
	Device device_;
	std::vector<char> host_; // staging for device buffers, grown to the largest seen
};

} // namespace tower
