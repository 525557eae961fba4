// What a sharded optimizer step needs from an all-reduce whose ranks share the node's memory.
#pragma once

#include <cstddef>
#include <functional>

#include <mpi.h>

#include "collectives/reduce_op.h"
#include "collectives/segments.h"
#include "base/tensor/dtype.h"

namespace tower {

// An all-reduce over shared memory can split the work after the reduction too: each node rank
// reduces one shard of a buffer from allocate() and updates that shard of variables the node
// keeps one copy of (allocate_node_copy()), leaving the rest to its peers.
// AllReduce::node_sharding() offers this where it can.
class NodeSharding {
public:
	virtual ~NodeSharding() = default;

	// This rank's place among the group's ranks on its node, and how many there are.
	virtual int node_rank() const = 0;
	virtual int node_size() const = 0;
	// The group's ranks on this node, for small exchanges of their own.
	virtual MPI_Comm node_comm() const = 0;

	// Collective over the group: reduces elements [shard.start, shard.start + shard.length) of
	// `data` (memory from allocate(), the same size on every rank) over the whole group, nodes
	// included, and leaves the result in this rank's `data` only. Every other element is left
	// as it was. Each node rank passes its own shard; together they must tile the buffer, and
	// the ranks with the same node rank on other nodes must pass the same shard.
	void reduce_shard(void* data, size_t count, DType dtype, ReduceOp op, Segment shard)
	{
		reduce_shard(data, count, dtype, op, shard, {});
	}
	// The same, calling `reduced(first, length)` (when given) on each piece of the shard as soon
	// as it holds its result, while it is still in the cache (across nodes: once, on the whole
	// shard, after the cross-node ring): a sharded update takes the
	// gradient's norm there instead of in a pass of its own.
	virtual void reduce_shard(void* data, size_t count, DType dtype, ReduceOp op, Segment shard,
				  const std::function<void(size_t first, size_t length)>& reduced) = 0;

	// Where node rank `node_rank` keeps what this rank keeps at `mine` (inside memory from
	// allocate(): the peers' matching allocations have the same layout).
	virtual char* peer_address(const void* mine, int node_rank) const = 0;

	// Collective over the node's ranks: `bytes` of memory that is one and the same on every node
	// rank (each gets its own address of it), for variables the node keeps a single copy of.
	// Its contents are undefined until written; it lives as long as this object.
	virtual void* allocate_node_copy(size_t bytes) = 0;

	// Returns once every node rank has called it: writes before it are visible to all after it.
	virtual void node_barrier() = 0;
};

} // namespace tower
