// The hierarchical all-reduce where nodes hold different numbers of the group's ranks: each node's
// leader reduces the node's buffers out of shared memory, the leaders all-reduce in a ring across
// nodes, and every other rank copies the result out of its leader's slot.
#pragma once

#include <memory>

#include "collectives/all_reduce.h"
#include "collectives/algorithms/all_reduce_ring.h"
#include "collectives/transports/shm_node.h"

namespace tower {

// The even layout's algorithm (all_reduce_hierarchical.h) pairs shard k of every node with local
// rank k of every other node, which needs every node to have a local rank k. Here one rank per
// node (its node rank 0, the leader) does the node's reduction and the cross-node step, so any
// layout works: a 2 + 1 split across two hosts sends each byte across hosts once each way, where a
// ring over all three ranks would send two thirds of it through every link. The ranks that are not
// leaders only stage and collect, and there is no node-sharded update.
class UnevenHierarchicalAllReduce final : public AllReduce {
public:
	// Collective over `group`; `node` holds the group's ranks on this node (they must share memory).
	UnevenHierarchicalAllReduce(MPI_Comm group, MPI_Comm node, const AllReduceOptions& options);

	AllReduceMode mode() const override { return AllReduceMode::hierarchical; }
	int group_size() const override { return group_size_; }
	void run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;

private:
	void run_round(const char* in, char* out, size_t count, DType dtype, ReduceOp op);

	ShmNode shm_;
	CommHandle leaders_;                 // the node leaders; null on the other ranks
	std::unique_ptr<RingAllReduce> cross_; // over leaders_, on the leaders
	int group_size_ = 1;
	size_t round_bytes_;
};

} // namespace tower
