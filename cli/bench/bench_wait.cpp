// tower bench wait: what watching a wait costs per collective, and what --debug-collectives costs.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/bench/bench.h"
#include "collectives/transports/communicator.h"
#include "base/watchdog/collective_debug.h"
#include "base/mpi/mpi_check.h"
#include "base/mpi/topology.h"
#include "base/watchdog/watched_wait.h"

namespace tower::cli {

int run_bench_wait(World& world, const BenchOptions& o)
{
	// The arrival table, as a training run has it.
	const Topology topology(world.comm(), o.ranks_per_node);
	const MPI_Comm comm = world.comm();
	const auto communicator = make_communicator(comm, Device{});
	const size_t count = std::max<size_t>(parse_bytes(o.min_bytes) / sizeof(float), 1);
	std::vector<float> data(count, 1.0f);
	const int iters = std::max(o.iters, 1) * 100;
	const bool debug_before = collective_debug();
	struct Way {
		std::string name;
		std::function<void()> once;
		bool debug;
	};
	const std::vector<Way> ways = {
		{"MPI_Allreduce (blocking)",
		 [&] { TOWER_MPI(MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm)); },
		 false},
		{"MPI_Iallreduce + MPI_Wait",
		 [&] {
			 MPI_Request r = MPI_REQUEST_NULL;
			 TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm, &r));
			 TOWER_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
		 },
		 false},
		{"MPI_Iallreduce + wait_request (watched)",
		 [&] {
			 MPI_Request r = MPI_REQUEST_NULL;
			 TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm, &r));
			 wait_request(r, {"bench all-reduce", comm});
		 },
		 false},
		{"communicator all_reduce", [&] { communicator->all_reduce(data.data(), data.data(), count, DType::f32, ReduceOp::sum); },
		 false},
		{"communicator all_reduce, --debug-collectives",
		 [&] { communicator->all_reduce(data.data(), data.data(), count, DType::f32, ReduceOp::sum); }, true},
	};
	// Rounds interleave the ways, so a burst of load elsewhere does not land on one way alone;
	// the median round is reported.
	constexpr int rounds = 5;
	std::vector<std::vector<double>> us(ways.size());
	for (int round = 0; round < rounds; ++round)
		for (size_t w = 0; w < ways.size(); ++w) {
			set_collective_debug(ways[w].debug);
			us[w].push_back(per_call_us(comm, iters, ways[w].once));
		}
	set_collective_debug(debug_before);
	if (world.rank() == 0) {
		std::printf("# %d ranks, %zu bytes, %d calls per round, median of %d rounds\n", world.size(), count * sizeof(float),
			    iters, rounds);
		for (size_t w = 0; w < ways.size(); ++w) {
			std::sort(us[w].begin(), us[w].end());
			std::printf("%-48s %10.2f us/call\n", ways[w].name.c_str(), us[w][rounds / 2]);
		}
	}
	return 0;
}

} // namespace tower::cli
