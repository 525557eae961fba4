// The hierarchical all-reduce's sharded form: each node rank reduces one shard in place and stops
// there, leaving the rest to the caller (a sharded optimizer step updates that shard of variables
// the node keeps one copy of, in memory from allocate_node_copy(), instead of spreading gradients).
#include "collectives/algorithms/all_reduce_hierarchical.h"
#include "base/watchdog/collective_debug.h"
#include "base/error.h"

namespace tower {

char* HierarchicalAllReduce::peer_address(const void* mine, int node_rank) const
{
	TOWER_CHECK(node_rank >= 0 && node_rank < shm_.size(), "node rank {} outside [0, {})", node_rank, shm_.size());
	for (const auto& window : windows_)
		if (window->holds(mine, 1))
			return window->base(node_rank) + (static_cast<const char*>(mine) - window->mine());
	TOWER_CHECK(false, "address {} is not inside memory from this all-reduce's allocate()", mine);
	return nullptr;
}

void HierarchicalAllReduce::reduce_shard(void* data, size_t count, DType dtype, ReduceOp op, Segment shard,
					 const std::function<void(size_t first, size_t length)>& reduced)
{
	TOWER_CHECK(shard.start + shard.length <= count, "shard [{}, {}) outside a buffer of {} elements", shard.start,
		    shard.start + shard.length, count);
	check_collective(shm_.comm(), {"sharded reduce", count * dtype_size(dtype), dtype});
	const size_t esize = dtype_size(dtype), local = static_cast<size_t>(shm_.size());
	char* own = static_cast<char*>(data);
	if (local > 1)
		(void)peer_address(own + count * esize - 1, 0); // throws unless the buffer came from allocate()
	// Every rank's buffer is complete once all have arrived.
	shm_.barrier("hierarchical all-reduce (node barrier)");
	// Own buffer first: the result overwrites exactly that input, in place.
	std::vector<const char*> sources = {own};
	for (int r = 0; r < shm_.size(); ++r)
		if (r != shm_.rank())
			sources.push_back(peer_address(own, r));
	reduce_own_shard(sources, own, shard, dtype, op, [&](size_t first, size_t length) {
		if (reduced)
			reduced(first, length);
	});
}

void* HierarchicalAllReduce::allocate_node_copy(size_t bytes)
{
	// Node rank 0 holds the memory; the others ask for none of their own and use its.
	node_copies_.push_back(std::make_unique<SharedWindow>(shm_.comm(), shm_.rank() == 0 ? bytes : 0));
	return node_copies_.back()->base(0);
}

} // namespace tower
