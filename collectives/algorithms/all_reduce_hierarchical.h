// The hierarchical all-reduce on host memory: shared-memory reduce-scatter in each node, a ring
// across nodes, shared-memory all-gather in each node.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/algorithms/all_reduce_ring.h"
#include "collectives/node_sharding.h"
#include "collectives/transports/shm_node.h"
#include "collectives/transports/shm_window.h"

namespace tower {

// The buffer streams through the node's shared-memory window in rounds. In each round every rank
// stages the parts of its input the others reduce, then reduces its own shard directly from all
// peers' slots (no messages: each byte is read where it lies), all-reduces that shard with the
// ranks of the same local rank on the other nodes, publishes the result, and finally copies the
// peers' finished shards. Two alternating halves of each slot let round k+1 be staged while a
// slow peer still reads round k. One node, or one rank per node, are the degenerate cases.
//
// Buffers from allocate() skip the staging: when every rank of the node passes such buffers,
// each reduces its shard straight out of the peers' send buffers and writes the result into
// every peer's receive buffer (see all_reduce_direct.cpp).
class HierarchicalAllReduce final : public AllReduce, public NodeSharding {
public:
	// Collective over the group: `node` holds the group's ranks on this node (they must share
	// memory), `cross` the ranks of this local rank on every node.
	HierarchicalAllReduce(MPI_Comm node, MPI_Comm cross, const AllReduceOptions& options);

	AllReduceMode mode() const override { return AllReduceMode::hierarchical; }
	int group_size() const override { return shm_.size() * cross_.group_size(); }
	void run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;

	void* allocate(size_t bytes) override;
	void deallocate(void* pointer) override;
	bool shares_buffers() const override { return true; }
	NodeSharding* node_sharding() override { return this; }

	int node_rank() const override { return shm_.rank(); }
	int node_size() const override { return shm_.size(); }
	MPI_Comm node_comm() const override { return shm_.comm(); }
	using NodeSharding::reduce_shard;
	void reduce_shard(void* data, size_t count, DType dtype, ReduceOp op, Segment shard,
			  const std::function<void(size_t first, size_t length)>& reduced) override;
	char* peer_address(const void* mine, int node_rank) const override;
	void* allocate_node_copy(size_t bytes) override;
	void node_barrier() override { shm_.barrier("sharded update (node barrier)"); }
	// Whether the last run() took the direct path (for tests).
	bool last_run_was_direct() const { return last_direct_; }

private:
	// Every node rank's send and receive buffer of one run(), indexed by node rank.
	struct PeerBuffers {
		std::vector<const char*> send;
		std::vector<char*> recv;
	};

	void run_staged(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
	void run_round(const char* in, char* out, size_t count, DType dtype, ReduceOp op, size_t slot_offset);
	void publish(const void* send, const void* recv, size_t bytes);
	std::optional<PeerBuffers> registered_peers() const;
	void run_direct(const PeerBuffers& peers, size_t count, DType dtype, ReduceOp op);
	// Reduces `shard` of the node's `sources` (this rank's own first) into `out`, across nodes
	// too, dividing for a mean; calls `done(first, length)` on each finished piece while it is
	// still in cache (across nodes: once, on the whole shard, after the cross-node ring).
	void reduce_own_shard(const std::vector<const char*>& sources, char* out, Segment shard, DType dtype, ReduceOp op,
			      const std::function<void(size_t, size_t)>& done);

	ShmNode shm_;
	RingAllReduce cross_;
	size_t round_bytes_;
	uint64_t rounds_ = 0; // rounds run so far; its parity picks the slot half
	std::vector<std::unique_ptr<SharedWindow>> windows_; // from allocate(), same order on every rank
	// From allocate_node_copy(): apart from windows_, whose buffers are per rank.
	std::vector<std::unique_ptr<SharedWindow>> node_copies_;
	bool last_direct_ = false;
};

} // namespace tower
