// Where each rank sits: node and local rank, from shared memory or a simulated grouping.
#pragma once

#include <optional>

#include <mpi.h>

namespace tower {

// Owns an MPI communicator and frees it on destruction.
class CommHandle {
public:
	CommHandle() = default;
	explicit CommHandle(MPI_Comm comm) : comm_(comm) {}
	~CommHandle();
	CommHandle(CommHandle&& other) noexcept : comm_(other.release()) {}
	CommHandle& operator=(CommHandle&& other) noexcept;
	CommHandle(const CommHandle&) = delete;
	CommHandle& operator=(const CommHandle&) = delete;

	MPI_Comm get() const { return comm_; }
	MPI_Comm release();

private:
	MPI_Comm comm_ = MPI_COMM_NULL;
};

// A private duplicate of `comm`: collectives on it never match another component's.
CommHandle duplicate_comm(MPI_Comm comm);

// Whether the ranks of `comm` sit on more than one host (some pair shares no memory).
// Collective over `comm`.
bool spans_hosts(MPI_Comm comm);

class Topology {
public:
	// Collective over `world`. Without `ranks_per_node`, nodes are the groups of ranks that share
	// memory (MPI_Comm_split_type SHARED). With it, consecutive ranks are grouped into nodes of
	// that many ranks, to exercise multi-node algorithms on one host; a value that does not
	// divide the world size throws tower::AgreedError on every rank.
	Topology(MPI_Comm world, std::optional<int> ranks_per_node);

	int rank() const { return rank_; }
	int size() const { return size_; }
	int local_rank() const { return local_rank_; }
	int local_size() const { return local_size_; }
	int node() const { return node_; }
	int node_count() const { return node_count_; }
	bool simulated() const { return simulated_; }
	// Rank and count among the processes on this host, which own its GPUs; equal to local rank
	// and size unless the nodes are simulated.
	int host_local_rank() const { return host_local_rank_; }
	int host_local_size() const { return host_local_size_; }

	MPI_Comm world() const { return world_; }
	// The ranks of this node, ordered by local rank.
	MPI_Comm node_comm() const { return node_comm_.get(); }
	// The ranks with this rank's local rank, one per node, ordered by node.
	MPI_Comm cross_comm() const { return cross_comm_.get(); }
	// The ranks on this node really share memory (always true when not simulated).
	bool node_shares_memory() const { return node_shares_memory_; }

private:
	MPI_Comm world_;
	int rank_ = 0, size_ = 1;
	int local_rank_ = 0, local_size_ = 1;
	int node_ = 0, node_count_ = 1;
	int host_local_rank_ = 0, host_local_size_ = 1;
	bool simulated_ = false;
	bool node_shares_memory_ = true;
	CommHandle node_comm_;
	CommHandle cross_comm_;
};

// Reads the simulated grouping from `--ranks-per-node` if given, else from the environment
// variable TOWER_RANKS_PER_NODE; throws tower::AgreedError when the value is not a positive
// integer.
std::optional<int> ranks_per_node_setting(std::optional<int> from_command_line);

} // namespace tower
