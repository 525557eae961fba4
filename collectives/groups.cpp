// Replica subgroups: validating a group assignment and building the communicators of this rank's group.
#include "collectives/groups.h"

#include <set>

#include <fmt/ranges.h>

#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

namespace {

std::string assignment_text(const GroupAssignment& groups)
{
	std::string out = "[";
	for (const auto& g : groups)
		out += fmt::format("{}[{}]", out.size() > 1 ? ", " : "", fmt::join(g, ", "));
	return out + "]";
}

MPI_Comm split(MPI_Comm comm, int color, int key)
{
	MPI_Comm out = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split(comm, color, key, &out));
	return out;
}

int comm_size(MPI_Comm comm)
{
	int n = 0;
	TOWER_MPI(MPI_Comm_size(comm, &n));
	return n;
}

} // namespace

int validate_group_assignment(const GroupAssignment& groups, int world_size)
{
	if (groups.empty())
		return world_size;
	std::set<int> seen;
	for (const auto& g : groups)
		for (int r : g) {
			if (r < 0 || r >= world_size)
				throw AgreedError(fmt::format("group assignment {} names rank {}, but the ranks are 0..{}",
							      assignment_text(groups), r, world_size - 1));
			if (!seen.insert(r).second)
				throw AgreedError(fmt::format("group assignment {} lists rank {} more than once; each rank "
							      "must be in exactly one group",
							      assignment_text(groups), r));
		}
	if (static_cast<int>(seen.size()) != world_size) {
		std::vector<int> missing;
		for (int r = 0; r < world_size; ++r)
			if (!seen.count(r))
				missing.push_back(r);
		throw AgreedError(fmt::format("group assignment {} leaves out rank(s) {}; it must be a permutation of "
					      "0..{}",
					      assignment_text(groups), fmt::join(missing, ", "), world_size - 1));
	}
	for (const auto& g : groups)
		if (g.size() != groups.front().size())
			throw AgreedError(fmt::format("group assignment {} has groups of different sizes ({} and {}); all "
						      "groups must be the same size",
						      assignment_text(groups), groups.front().size(), g.size()));
	return static_cast<int>(groups.front().size());
}

ReplicaGroup make_replica_group(const Topology& topology, const GroupAssignment& groups)
{
	ReplicaGroup out;
	out.size = validate_group_assignment(groups, topology.size());
	int color = 0, key = topology.rank();
	for (size_t g = 0; g < groups.size(); ++g)
		for (size_t i = 0; i < groups[g].size(); ++i)
			if (groups[g][i] == topology.rank()) {
				color = static_cast<int>(g);
				key = static_cast<int>(i);
			}
	out.group = CommHandle(split(topology.world(), color, key));
	// Within the group, nodes are the topology's nodes; ranks keep their order in the group.
	int group_rank = 0;
	TOWER_MPI(MPI_Comm_rank(out.group.get(), &group_rank));
	out.node = CommHandle(split(out.group.get(), topology.node(), group_rank));
	int node_rank = 0;
	TOWER_MPI(MPI_Comm_rank(out.node.get(), &node_rank));
	out.cross = CommHandle(split(out.group.get(), node_rank, group_rank));
	out.node_shares_memory = topology.node_shares_memory();

	// Uniform when every rank of the group sees the same node size.
	int sizes[2] = {comm_size(out.node.get()), -comm_size(out.node.get())};
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, out.group.get(), &request));
	wait_request(request, {"replica group setup", out.group.get()});
	out.uniform_nodes = sizes[0] == -sizes[1];
	return out;
}

} // namespace tower
