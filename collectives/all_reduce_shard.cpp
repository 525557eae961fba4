// The hierarchical all-reduce's sharded form: each node rank reduces one shard in place and stops
// there, leaving the spreading of results to the caller (a sharded optimizer step spreads the
// updated parameters instead of the reduced gradients).
#include <algorithm>

#include "collectives/all_reduce_hierarchical.h"
#include "collectives/reduce_host.h"
#include "runtime/error.h"

namespace tower {

namespace {

// As in the direct path: a block's inputs and result stay in the core's L2 between passes.
constexpr size_t shard_block_bytes = size_t{64} << 10;

} // namespace

char* HierarchicalAllReduce::peer_address(const void* mine, int node_rank) const
{
	TOWER_CHECK(node_rank >= 0 && node_rank < shm_.size(), "node rank {} outside [0, {})", node_rank, shm_.size());
	for (const auto& window : windows_)
		if (window->holds(mine, 1))
			return window->base(node_rank) + (static_cast<const char*>(mine) - window->mine());
	TOWER_CHECK(false, "address {} is not inside memory from this all-reduce's allocate()", mine);
	return nullptr;
}

void HierarchicalAllReduce::reduce_shard(void* data, size_t count, DType dtype, ReduceOp op, Segment shard)
{
	TOWER_CHECK(shard.start + shard.length <= count, "shard [{}, {}) outside a buffer of {} elements", shard.start,
		    shard.start + shard.length, count);
	const size_t esize = dtype_size(dtype), local = static_cast<size_t>(shm_.size());
	char* own = static_cast<char*>(data);
	TOWER_CHECK(local == 1 || peer_address(own + count * esize - 1, 0) != nullptr,
		    "reduce_shard needs a buffer from allocate()");
	// Every rank's buffer is complete once all have arrived.
	shm_.barrier();
	// Own buffer first: the result overwrites exactly that input, in place.
	std::vector<const char*> sources = {own};
	for (int r = 0; r < shm_.size(); ++r)
		if (r != shm_.rank())
			sources.push_back(peer_address(own, r));
	const bool across = cross_.group_size() > 1;
	// Across nodes the ring moves the whole shard at once, so it is reduced over the node first.
	const size_t block = across ? std::max<size_t>(shard.length, 1) : std::max<size_t>(shard_block_bytes / esize, 1);
	std::vector<const void*> inputs(local);
	for (size_t first = shard.start; first < shard.start + shard.length; first += block) {
		const size_t length = std::min(block, shard.start + shard.length - first);
		for (size_t k = 0; k < local; ++k)
			inputs[k] = sources[k] + first * esize;
		reduce_host(own + first * esize, inputs.data(), local, length, dtype, op);
		if (!across && op == ReduceOp::mean)
			divide_host(own + first * esize, length, dtype, group_size());
	}
	if (across) {
		char* part = own + shard.start * esize;
		cross_.run(part, part, shard.length, dtype, op == ReduceOp::mean ? ReduceOp::sum : op);
		if (op == ReduceOp::mean)
			divide_host(part, shard.length, dtype, group_size());
	}
}

} // namespace tower
