// The hierarchical all-reduce on host memory: shared-memory reduce-scatter in each node, a ring
// across nodes, shared-memory all-gather in each node.
#include "collectives/algorithms/all_reduce_hierarchical.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/algorithms/reduce_host.h"
#include "collectives/segments.h"
#include "base/watchdog/collective_debug.h"

namespace tower {

HierarchicalAllReduce::HierarchicalAllReduce(MPI_Comm node, MPI_Comm cross, const AllReduceOptions& options)
    : shm_(node, 2 * std::max<size_t>(options.chunk_bytes, 8)), cross_(cross, options),
      round_bytes_(std::max<size_t>(options.chunk_bytes, 8))
{
}

void HierarchicalAllReduce::run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op)
{
	check_collective(shm_.comm(), {"hierarchical all-reduce", count * dtype_size(dtype), dtype});
	last_direct_ = false;
	if (count == 0)
		return;
	if (shm_.size() == 1) {
		// One rank on this node (so on every node): nothing to stage, and the ring across nodes
		// streams the whole buffer at once rather than a chunk-sized round at a time.
		cross_.run(send, recv, count, dtype, op);
		return;
	}
	// Every rank says where its buffers are; after the barrier all ranks read the same mailboxes,
	// so they all choose the same path.
	publish(send, recv, count * dtype_size(dtype));
	shm_.barrier("hierarchical all-reduce (node barrier)");
	if (const auto peers = registered_peers()) {
		last_direct_ = true;
		run_direct(*peers, count, dtype, op);
		return;
	}
	run_staged(send, recv, count, dtype, op);
}

void HierarchicalAllReduce::run_staged(const void* send, void* recv, size_t count, DType dtype, ReduceOp op)
{
	const size_t esize = dtype_size(dtype);
	const size_t round = std::max<size_t>(round_bytes_ / esize, 1);
	// The halves alternate across calls too: a peer may still be copying out of the previous
	// call's last round when this rank stages its next one.
	for (size_t start = 0; start < count; start += round, ++rounds_)
		run_round(static_cast<const char*>(send) + start * esize, static_cast<char*>(recv) + start * esize,
			  std::min(round, count - start), dtype, op, (rounds_ % 2) * round_bytes_);
}

void HierarchicalAllReduce::run_round(const char* in, char* out, size_t count, DType dtype, ReduceOp op,
				      size_t slot_offset)
{
	const size_t esize = dtype_size(dtype), local = static_cast<size_t>(shm_.size());
	const int me = shm_.rank();
	const Segment mine = segment_of(count, local, static_cast<size_t>(me));
	char* my_slot = shm_.slot(me) + slot_offset;
	auto slot_at = [&](int r, size_t element) { return shm_.slot(r) + slot_offset + element * esize; };

	// Stage what the peers reduce: everything but this rank's own shard, which it reads in place.
	if (local > 1) {
		std::memcpy(my_slot, in, mine.start * esize);
		const size_t after = mine.start + mine.length;
		std::memcpy(my_slot + after * esize, in + after * esize, (count - after) * esize);
		shm_.barrier("hierarchical all-reduce (node barrier)");
	}

	std::vector<const void*> inputs = {in + mine.start * esize};
	for (int r = 0; r < shm_.size(); ++r)
		if (r != me)
			inputs.push_back(slot_at(r, mine.start));
	char* shard = out + mine.start * esize;
	reduce_host(shard, inputs.data(), inputs.size(), mine.length, dtype, op);
	if (cross_.group_size() > 1)
		cross_.run(shard, shard, mine.length, dtype, op == ReduceOp::mean ? ReduceOp::sum : op);
	if (op == ReduceOp::mean)
		divide_host(shard, mine.length, dtype, group_size());
	if (local == 1)
		return;

	// Publish the finished shard, then collect everyone else's.
	std::memcpy(slot_at(me, mine.start), shard, mine.length * esize);
	shm_.barrier("hierarchical all-reduce (node barrier)");
	for (int r = 0; r < shm_.size(); ++r) {
		if (r == me)
			continue;
		const Segment theirs = segment_of(count, local, static_cast<size_t>(r));
		std::memcpy(out + theirs.start * esize, slot_at(r, theirs.start), theirs.length * esize);
	}
}

} // namespace tower
