// tower bench: nccl-tests-style tables for the collectives, and the fused-bucket comparison.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <mpi.h>

#include "base/mpi/topology.h"
#include "base/mpi/world.h"

namespace tower::cli {

struct BenchOptions {
	std::string collective = "allreduce"; // allreduce, reduce_scatter, all_gather, broadcast, fusion, wait
	std::string mode = "all";
	std::string dtype = "f32";
	std::string op = "sum";
	std::string min_bytes = "8", max_bytes = "256M";
	int factor = 2;
	int iters = 20, warmup = 5;
	std::optional<int> ranks_per_node;
	std::string json;
	std::string device = "auto";
	double fusion_mb = 25;
	bool deterministic = false; // all-reduce in rank order (collectives/algorithms/all_reduce_ordered.h)
};

int run_bench(World& world, const BenchOptions& options);
int run_bench_fusion(World& world, const BenchOptions& options);
// Per-call cost of a watched wait and of --debug-collectives on a small all-reduce (-b sets its size).
int run_bench_wait(World& world, const BenchOptions& options);

// Collective: microseconds per call of `once` over `iters` calls after a barrier, the slowest rank's.
double per_call_us(MPI_Comm comm, int iters, const std::function<void()>& once);

// The memory-copy rate of one host and the shared-memory all-reduce busbw it corresponds to
// (cli/bench/bench_memory.cpp).
struct MemoryBound {
	int ranks = 1;
	double copy_gbps = 0;  // one rank's memcpy rate while every rank copies
	double busbw_gbps = 0; // the all-reduce busbw at that rate: copy_gbps * 2(n-1)/n
};
// Collective: every rank copies `bytes` at once, `iters` times; the slowest rank's rate.
MemoryBound measure_memory_bound(MPI_Comm comm, size_t bytes, int iters);
// The rate and its formula, as a '#' line of the bench's table.
std::string describe_memory_bound(const MemoryBound& bound, size_t bytes);

// The link between the first ranks of node 0 and node 1 as a plain TCP stream of their own
// (cli/bench/bench_link.cpp): the bound of a cross-host all-reduce's busbw.
struct LinkRate {
	double one_way_gbps = 0;
	double both_ways_gbps = 0; // each way, while both directions stream at once
	std::string problem;       // why it could not be measured; empty when it was
};
// Collective over the topology's world: nullopt on one node (or simulated nodes).
std::optional<LinkRate> measure_link_rate(const Topology& topology, size_t bytes, int iters);
std::string describe_link_rate(const LinkRate& rate, size_t bytes);

// "8", "4K", "256M", "1G" -> bytes; throws tower::AgreedError on anything else.
size_t parse_bytes(const std::string& text);

} // namespace tower::cli
