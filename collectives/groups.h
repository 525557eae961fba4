// Replica subgroups: validating a group assignment and building the communicators of this rank's group.
#pragma once

#include <vector>

#include "base/mpi/topology.h"

namespace tower {

// groups[g] lists the world ranks of group g. Empty means one group of every rank.
using GroupAssignment = std::vector<std::vector<int>>;

// Checks that every rank of 0..world_size-1 appears exactly once and that all groups have the
// same size; returns that size (world_size for an empty assignment). Throws tower::AgreedError
// naming the problem otherwise (every rank passes the same assignment, so every rank throws).
int validate_group_assignment(const GroupAssignment& groups, int world_size);

// The communicators an all-reduce over this rank's group needs, each one private to its owner.
struct ReplicaGroup {
	CommHandle group; // the ranks of this rank's group, ordered as listed in the assignment
	CommHandle node;  // the group's ranks on this rank's (possibly simulated) node
	CommHandle cross; // the group's ranks with this rank's position in its node, one per node
	int size = 1;
	bool node_shares_memory = true;
	// Every node holds the same number of the group's ranks (hierarchical needs this).
	bool uniform_nodes = true;
};

// Collective over the topology's world.
ReplicaGroup make_replica_group(const Topology& topology, const GroupAssignment& groups);

} // namespace tower
