// Which algorithm an all-reduce mode runs: ring, hierarchical or naive by mode, each summing in
// rank order when asked to be deterministic, on the device's communicator (NCCL) on GPUs for ring
// and hierarchical (naive goes through host memory and MPI), node-sharded only in the CPU
// hierarchical mode on nodes of equal size; and which modes can run here.
#include "collectives/all_reduce.h"

#include "base/error.h"
#include "collectives/algorithms/all_reduce_comm.h"
#include "collectives/algorithms/all_reduce_hierarchical.h"
#include "collectives/algorithms/all_reduce_hierarchical_uneven.h"
#include "collectives/algorithms/all_reduce_naive.h"
#include "collectives/algorithms/all_reduce_ordered.h"
#include "collectives/algorithms/all_reduce_ring.h"
#include "collectives/transports/communicator.h"

namespace tower {

namespace {

std::string why_hierarchical_cannot_run(const ReplicaGroup& group, const Device& device)
{
	if (!group.uniform_nodes && device.is_cuda())
		return "hierarchical all-reduce on GPUs needs the same number of the group's ranks on every node; "
		       "choose groups that span nodes evenly, or the ring mode (`allreduce` ring)";
	if (!device.is_cuda() && !group.node_shares_memory)
		return "hierarchical all-reduce on the CPU needs each node's ranks to share memory, but a simulated "
		       "node spans hosts; choose `ranks_per_node` that divides the ranks per host";
	return {};
}

std::unique_ptr<AllReduce> make_hierarchical(const ReplicaGroup& group, const Device& device,
					     const AllReduceOptions& options)
{
	if (const std::string why = why_hierarchical_cannot_run(group, device); !why.empty())
		throw AgreedError(why);
	if (device.is_cuda())
		return std::make_unique<CommHierarchicalAllReduce>(make_communicator(group.node.get(), device),
								   make_communicator(group.cross.get(), device),
								   make_communicator(group.group.get(), device));
	// Nodes of different sizes: one leader per node does the node's share (all_reduce_hierarchical_uneven.h).
	if (!group.uniform_nodes)
		return std::make_unique<UnevenHierarchicalAllReduce>(group.group.get(), group.node.get(), options);
	return std::make_unique<HierarchicalAllReduce>(group.node.get(), group.cross.get(), options);
}

} // namespace

std::unique_ptr<AllReduce> make_all_reduce(const Topology& topology, const Device& device, AllReduceMode mode,
					   const GroupAssignment& groups, const AllReduceOptions& options)
{
	const ReplicaGroup group = make_replica_group(topology, groups);
	if (options.deterministic) {
		if (device.is_cuda())
			throw AgreedError("`deterministic` sums on the host in rank order and does not take CUDA buffers; "
					  "drop `deterministic`, or train on the CPU (`device` cpu)");
		return std::make_unique<OrderedAllReduce>(group.group.get(), mode, options);
	}
	switch (mode) {
	case AllReduceMode::ring:
		if (device.is_cuda())
			return std::make_unique<CommRingAllReduce>(make_communicator(group.group.get(), device));
		return std::make_unique<RingAllReduce>(group.group.get(), options);
	case AllReduceMode::hierarchical: return make_hierarchical(group, device, options);
	case AllReduceMode::naive: return std::make_unique<NaiveAllReduce>(group.group.get(), device);
	}
	throw AgreedError("unknown all-reduce mode");
}

std::string why_all_reduce_cannot_run(const Topology& topology, const Device& device, AllReduceMode mode,
				      const GroupAssignment& groups)
{
	if (mode != AllReduceMode::hierarchical)
		return {};
	return why_hierarchical_cannot_run(make_replica_group(topology, groups), device);
}

AllReduceMode automatic_all_reduce_mode(const Topology& topology, const Device& device, const GroupAssignment& groups)
{
	if (device.is_cuda())
		return AllReduceMode::ring;
	// One rank per node leaves the hierarchical mode nothing to share: it is the ring.
	if (topology.node_count() == topology.size())
		return AllReduceMode::ring;
	return why_all_reduce_cannot_run(topology, device, AllReduceMode::hierarchical, groups).empty()
		       ? AllReduceMode::hierarchical
		       : AllReduceMode::ring;
}

} // namespace tower
