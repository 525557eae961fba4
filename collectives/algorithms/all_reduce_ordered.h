// The deterministic all-reduce: every element summed in rank order, whatever the mode and topology.
#pragma once

#include <vector>

#include "collectives/all_reduce.h"
#include "base/mpi/topology.h"

namespace tower {

// With AllReduceOptions::deterministic every mode becomes this: each rank collects segment r of
// every rank's buffer (an all-to-all), reduces it as ((x0 + x1) + x2) + ... in group-rank order,
// and all ranks gather the reduced segments. The result depends only on the inputs and the
// group's rank order, not on the mode, the node layout or the segment boundaries, so every mode
// gives the same bits at any rank count. It moves as many bytes as the ring does, through MPI.
class OrderedAllReduce final : public AllReduce {
public:
	// Collective over `group` (duplicated). `mode` is the mode asked for, reported by mode().
	OrderedAllReduce(MPI_Comm group, AllReduceMode mode, const AllReduceOptions& options);

	AllReduceMode mode() const override { return mode_; }
	int group_size() const override { return size_; }
	void run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;

private:
	CommHandle comm_;
	AllReduceMode mode_;
	int rank_ = 0, size_ = 1;
	size_t chunk_bytes_;
	std::vector<char> gathered_, reduced_; // one round's segments from every rank, and their reduction
};

} // namespace tower
