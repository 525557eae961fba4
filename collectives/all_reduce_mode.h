// Which all-reduce algorithm runs and how: what a program chooses, apart from the algorithms themselves.
#pragma once

#include <cstddef>
#include <string_view>

namespace tower {

// ring: a bandwidth-optimal ring (NCCL's on GPUs); hierarchical: within each node first, then
// across nodes; naive: MPI_Allreduce.
enum class AllReduceMode { ring, hierarchical, naive };

std::string_view all_reduce_mode_name(AllReduceMode mode);

struct AllReduceOptions {
	// The piece the CPU algorithms stream through at a time: the ring's message size (across hosts
	// at most Open MPI's TCP eager payload) and the
	// shared-memory round of the hierarchical mode. Tests make it tiny to reach multi-piece paths.
	size_t chunk_bytes = size_t{1} << 20;
	// Sum every element in group-rank order, whatever the mode and node layout, so all modes
	// give the same bits at any rank count (collectives/algorithms/all_reduce_ordered.h). Host buffers only.
	bool deterministic = false;
};

} // namespace tower
