// The ring all-reduce on host memory: reduce-scatter then all-gather, n-1 steps each, pipelined.
#pragma once

#include <vector>

#include "collectives/all_reduce.h"
#include "base/mpi/topology.h"

namespace tower {

// Each rank owns one of n segments. In reduce-scatter step s it sends segment (r - s) to its
// right neighbour while receiving segment (r - s - 1) from its left one and reducing it; after
// n-1 steps it holds the full reduction of segment (r + 1). All-gather passes the finished
// segments around the ring the same way. Segments travel in chunks with several receives posted,
// so the next chunks are in flight while the current one is reduced, and large buffers stream
// through a fixed staging area.
class RingAllReduce final : public AllReduce {
public:
	// Collective over `comm` (duplicated).
	RingAllReduce(MPI_Comm comm, const AllReduceOptions& options);

	AllReduceMode mode() const override { return AllReduceMode::ring; }
	int group_size() const override { return size_; }
	void run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;

	// The two halves, usable on their own: after reduce_scatter(), this rank's owned segment
	// of `data` (see owned_segment) holds the reduction; all_gather() spreads owned segments.
	void reduce_scatter(void* data, size_t count, DType dtype, ReduceOp op);
	void all_gather(void* data, size_t count, DType dtype);
	int owned_segment() const { return (rank_ + 1) % size_; }

private:
	// Reduce-scatter keeps up to staging_bytes of receives posted: 4 chunks of the default 1 MiB,
	// or 16 of the eager-sized messages across hosts (about 1 MiB); the piece of a reduction
	// between two nudges of MPI's progress.
	static constexpr size_t staging_bytes = size_t{4} << 20;
	static constexpr size_t min_receives_in_flight = 4, max_receives_in_flight = 16;
	static constexpr size_t progress_block_bytes = size_t{256} << 10;

	void reduce_scatter_step(char* data, size_t count, DType dtype, ReduceOp op, int step);
	void reduce_keeping_progress(char* target, const char* received, size_t count, DType dtype, ReduceOp op);
	void all_gather_step(char* data, size_t count, DType dtype, int step);

	CommHandle comm_;
	int rank_ = 0, size_ = 1;
	int left_ = 0, right_ = 0;
	size_t chunk_bytes_ = 0; // the bytes of one message, the same on every rank
	size_t receives_in_flight_ = 0;
	std::vector<char> staging_; // a chunk per receive in flight
};

} // namespace tower
