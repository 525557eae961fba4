// All-reduce algorithms behind one interface, chosen by mode name: ring, hierarchical, naive.
#include "collectives/all_reduce.h"

#include "collectives/all_reduce_comm.h"
#include "collectives/all_reduce_hierarchical.h"
#include "collectives/all_reduce_naive.h"
#include "collectives/all_reduce_ring.h"
#include "collectives/communicator.h"
#include "runtime/agree.h"
#include "runtime/error.h"

namespace tower {

std::string_view all_reduce_mode_name(AllReduceMode mode)
{
	switch (mode) {
	case AllReduceMode::ring: return "ring";
	case AllReduceMode::hierarchical: return "hierarchical";
	case AllReduceMode::naive: return "naive";
	}
	return "unknown";
}

AllReduceMode parse_all_reduce_mode(std::string_view text)
{
	if (text == "ring")
		return AllReduceMode::ring;
	if (text == "hierarchical")
		return AllReduceMode::hierarchical;
	if (text == "naive")
		return AllReduceMode::naive;
	throw AgreedError(fmt::format("unknown all-reduce mode '{}': use ring, hierarchical or naive", text));
}

namespace {

std::unique_ptr<AllReduce> make_hierarchical(const ReplicaGroup& group, const Device& device,
					     const AllReduceOptions& options)
{
	if (!group.uniform_nodes)
		throw AgreedError("hierarchical all-reduce needs the same number of the group's ranks on every node; "
				  "choose groups that span nodes evenly, or use --mode ring");
	if (device.is_cuda())
		return std::make_unique<CommHierarchicalAllReduce>(make_communicator(group.node.get(), device),
								   make_communicator(group.cross.get(), device),
								   make_communicator(group.group.get(), device));
	if (!group.node_shares_memory)
		throw AgreedError("hierarchical all-reduce on the CPU needs each node's ranks to share memory, but a "
				  "simulated node spans hosts; choose --ranks-per-node that divides the ranks per host");
	return std::make_unique<HierarchicalAllReduce>(group.node.get(), group.cross.get(), options);
}

} // namespace

std::unique_ptr<AllReduce> make_all_reduce(const Topology& topology, const Device& device, AllReduceMode mode,
					   const GroupAssignment& groups, const AllReduceOptions& options)
{
	const ReplicaGroup group = make_replica_group(topology, groups);
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

} // namespace tower
