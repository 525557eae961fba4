// Where each rank sits: node and local rank, from shared memory or a simulated grouping.
#include "base/mpi/topology.h"

#include <cstdlib>
#include <string>

#include "base/watchdog/arrival_table.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

CommHandle::~CommHandle()
{
	if (comm_ != MPI_COMM_NULL) {
		int finalized = 0;
		MPI_Finalized(&finalized);
		if (!finalized)
			MPI_Comm_free(&comm_);
	}
}

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept
{
	if (this != &other) {
		CommHandle old(release());
		comm_ = other.release();
	}
	return *this;
}

MPI_Comm CommHandle::release()
{
	MPI_Comm comm = comm_;
	comm_ = MPI_COMM_NULL;
	return comm;
}

CommHandle duplicate_comm(MPI_Comm comm)
{
	MPI_Comm out = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_dup(comm, &out));
	return CommHandle(out);
}

bool spans_hosts(MPI_Comm comm)
{
	int size = 0;
	TOWER_MPI(MPI_Comm_size(comm, &size));
	MPI_Comm host = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
	const CommHandle owned(host);
	int host_size = 0;
	TOWER_MPI(MPI_Comm_size(owned.get(), &host_size));
	return host_size < size;
}

namespace {

MPI_Comm split(MPI_Comm comm, int color, int key)
{
	MPI_Comm out = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split(comm, color, key, &out));
	return out;
}

} // namespace

Topology::Topology(MPI_Comm world, std::optional<int> ranks_per_node) : world_(world)
{
	TOWER_MPI(MPI_Comm_rank(world, &rank_));
	TOWER_MPI(MPI_Comm_size(world, &size_));
	// Stall reports read where this host's ranks wait (the first Topology over every rank maps the table).
	join_arrival_table(world);

	// The ranks that really share this host's memory, whatever grouping is simulated.
	MPI_Comm host = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host));
	CommHandle host_comm(host);
	TOWER_MPI(MPI_Comm_rank(host, &host_local_rank_));
	TOWER_MPI(MPI_Comm_size(host, &host_local_size_));

	if (ranks_per_node) {
		const int k = *ranks_per_node;
		if (k <= 0 || size_ % k != 0)
			throw AgreedError(fmt::format(
				"`ranks_per_node` {} does not divide the {} ranks of this job into equal nodes; "
				"choose a divisor of {}",
				k, size_, size_));
		simulated_ = true;
		node_comm_ = CommHandle(split(world, rank_ / k, rank_));
	} else {
		node_comm_ = std::move(host_comm);
	}
	TOWER_MPI(MPI_Comm_rank(node_comm_.get(), &local_rank_));
	TOWER_MPI(MPI_Comm_size(node_comm_.get(), &local_size_));

	// Node index: the order of each node's first rank among all node leaders.
	CommHandle leaders(split(world, local_rank_ == 0 ? 0 : MPI_UNDEFINED, rank_));
	if (local_rank_ == 0) {
		TOWER_MPI(MPI_Comm_rank(leaders.get(), &node_));
		TOWER_MPI(MPI_Comm_size(leaders.get(), &node_count_));
	}
	int node_info[2] = {node_, node_count_};
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Ibcast(node_info, 2, MPI_INT, 0, node_comm_.get(), &request));
	wait_request(request, {"topology setup", node_comm_.get()});
	node_ = node_info[0];
	node_count_ = node_info[1];

	cross_comm_ = CommHandle(split(world, local_rank_, node_));

	// A simulated node is really shared memory only if all its ranks share one host's memory.
	if (simulated_) {
		MPI_Comm shared = MPI_COMM_NULL;
		TOWER_MPI(MPI_Comm_split_type(node_comm_.get(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
		CommHandle shared_comm(shared);
		int shared_size = 0;
		TOWER_MPI(MPI_Comm_size(shared, &shared_size));
		int local = shared_size == local_size_ ? 1 : 0, all = 0;
		TOWER_MPI(MPI_Iallreduce(&local, &all, 1, MPI_INT, MPI_MIN, node_comm_.get(), &request));
		wait_request(request, {"topology setup", node_comm_.get()});
		node_shares_memory_ = all == 1;
	}
}

std::optional<int> ranks_per_node_setting(std::optional<int> from_command_line)
{
	if (from_command_line)
		return from_command_line;
	const char* env = std::getenv("TOWER_RANKS_PER_NODE");
	if (!env || !*env)
		return std::nullopt;
	char* end = nullptr;
	const long value = std::strtol(env, &end, 10);
	if (*end != '\0' || value <= 0 || value > 1 << 20)
		throw AgreedError(fmt::format("TOWER_RANKS_PER_NODE='{}' is not a positive integer; set it to "
					      "the number of ranks per simulated node, or unset it",
					      env));
	return static_cast<int>(value);
}

} // namespace tower
