// tower bench: nccl-tests-style tables for the collectives, and the fused-bucket comparison.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "base/mpi/world.h"

namespace tower::cli {

struct BenchOptions {
	std::string collective = "allreduce"; // allreduce, reduce_scatter, all_gather, broadcast, fusion
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
	bool deterministic = false; // all-reduce in rank order (collectives/all_reduce_ordered.h)
};

int run_bench(World& world, const BenchOptions& options);
int run_bench_fusion(World& world, const BenchOptions& options);
// Per-call cost of a watched wait and of --debug-collectives on a small all-reduce (-b sets its size).
int run_bench_wait(World& world, const BenchOptions& options);

// Collective: microseconds per call of `once` over `iters` calls after a barrier, the slowest rank's.
double per_call_us(MPI_Comm comm, int iters, const std::function<void()>& once);

// "8", "4K", "256M", "1G" -> bytes; throws tower::AgreedError on anything else.
size_t parse_bytes(const std::string& text);

} // namespace tower::cli
