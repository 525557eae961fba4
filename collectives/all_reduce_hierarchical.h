// The hierarchical all-reduce on host memory: shared-memory reduce-scatter in each node, a ring
// across nodes, shared-memory all-gather in each node.
#pragma once

#include <memory>

#include "collectives/all_reduce.h"
#include "collectives/all_reduce_ring.h"
#include "collectives/shm_node.h"

namespace tower {

// The buffer streams through the node's shared-memory window in rounds. In each round every rank
// stages the parts of its input the others reduce, then reduces its own shard directly from all
// peers' slots (no messages: each byte is read where it lies), all-reduces that shard with the
// ranks of the same local rank on the other nodes, publishes the result, and finally copies the
// peers' finished shards. Two alternating halves of each slot let round k+1 be staged while a
// slow peer still reads round k. One node, or one rank per node, are the degenerate cases.
class HierarchicalAllReduce final : public AllReduce {
public:
	// Collective over the group: `node` holds the group's ranks on this node (they must share
	// memory), `cross` the ranks of this local rank on every node.
	HierarchicalAllReduce(MPI_Comm node, MPI_Comm cross, const AllReduceOptions& options);

	AllReduceMode mode() const override { return AllReduceMode::hierarchical; }
	int group_size() const override { return shm_.size() * cross_.group_size(); }
	void run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;

private:
	void run_round(const char* in, char* out, size_t count, DType dtype, ReduceOp op, size_t slot_offset);

	ShmNode shm_;
	RingAllReduce cross_;
	size_t round_bytes_;
	uint64_t rounds_ = 0; // rounds run so far; its parity picks the slot half
};

} // namespace tower
