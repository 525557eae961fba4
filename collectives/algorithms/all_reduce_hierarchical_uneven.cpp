// The hierarchical all-reduce where nodes hold different numbers of the group's ranks: each node's
// leader reduces the node's buffers out of shared memory, the leaders all-reduce in a ring across
// nodes, and every other rank copies the result out of its leader's slot.
#include "collectives/algorithms/all_reduce_hierarchical_uneven.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/algorithms/reduce_host.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/collective_debug.h"

namespace tower {

namespace {

MPI_Comm leaders_of(MPI_Comm group, bool leader)
{
	int rank = 0;
	TOWER_MPI(MPI_Comm_rank(group, &rank));
	MPI_Comm out = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split(group, leader ? 0 : MPI_UNDEFINED, rank, &out));
	return out;
}

} // namespace

UnevenHierarchicalAllReduce::UnevenHierarchicalAllReduce(MPI_Comm group, MPI_Comm node,
							 const AllReduceOptions& options)
    : shm_(node, std::max<size_t>(options.chunk_bytes, 8)), round_bytes_(std::max<size_t>(options.chunk_bytes, 8))
{
	TOWER_MPI(MPI_Comm_size(group, &group_size_));
	leaders_ = CommHandle(leaders_of(group, shm_.rank() == 0));
	if (shm_.rank() == 0)
		cross_ = std::make_unique<RingAllReduce>(leaders_.get(), options);
}

void UnevenHierarchicalAllReduce::run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op)
{
	check_collective(shm_.comm(), {"hierarchical all-reduce (uneven nodes)", count * dtype_size(dtype), dtype});
	const size_t esize = dtype_size(dtype);
	const size_t round = std::max<size_t>(round_bytes_ / esize, 1);
	for (size_t start = 0; start < count; start += round)
		run_round(static_cast<const char*>(send) + start * esize, static_cast<char*>(recv) + start * esize,
			  std::min(round, count - start), dtype, op);
}

void UnevenHierarchicalAllReduce::run_round(const char* in, char* out, size_t count, DType dtype, ReduceOp op)
{
	const size_t bytes = count * dtype_size(dtype);
	const bool leader = shm_.rank() == 0;
	// The leader reads its own input where it lies; the others stage theirs in their slots. A
	// slot is rewritten only after the barrier that ends the previous round's reads of it.
	if (!leader)
		std::memcpy(shm_.slot(shm_.rank()), in, bytes);
	if (shm_.size() > 1)
		shm_.barrier("hierarchical all-reduce, uneven nodes (node barrier)");
	if (leader) {
		std::vector<const void*> inputs = {in};
		for (int r = 1; r < shm_.size(); ++r)
			inputs.push_back(shm_.slot(r));
		reduce_host(out, inputs.data(), inputs.size(), count, dtype, op);
		if (cross_->group_size() > 1)
			cross_->run(out, out, count, dtype, op == ReduceOp::mean ? ReduceOp::sum : op);
		if (op == ReduceOp::mean)
			divide_host(out, count, dtype, group_size_);
		if (shm_.size() > 1)
			std::memcpy(shm_.slot(0), out, bytes);
	}
	if (shm_.size() == 1)
		return;
	shm_.barrier("hierarchical all-reduce, uneven nodes (node barrier)");
	if (!leader)
		std::memcpy(out, shm_.slot(0), bytes);
	// The leader's slot is read until every rank has copied: the next round's staging (of other
	// slots) may start, but the leader writes its slot again only after the next first barrier.
}

} // namespace tower
