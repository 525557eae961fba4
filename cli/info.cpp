// `tower info`: where every rank runs and what this build was made with.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/options/names.h"
#include "cli/command.h"
#include "models/kernels/cpu/cpu_threads.h"
#include "base/device/build_info.h"
#include "base/device/device.h"
#include "base/mpi/gather.h"
#include "base/mpi/topology.h"

namespace tower::cli {

namespace {

struct InfoOptions {
	std::optional<int> ranks_per_node;
	std::string device = "auto";
	bool json = false;
};

std::string host_name()
{
	char name[HOST_NAME_MAX + 1] = {};
	gethostname(name, sizeof name - 1);
	return name;
}

// "gpu" names the physical GPU (PCI bus id and UUID), which the index in "device" does not once
// CUDA_VISIBLE_DEVICES renumbers the devices; empty on the CPU.
nlohmann::json rank_row(const Topology& topology, const Device& device, const GpuRuntimeInfo& gpus)
{
	return {{"rank", topology.rank()},	     {"node", topology.node()},
		{"local_rank", topology.local_rank()}, {"hostname", host_name()},
		{"pid", static_cast<long>(getpid())},  {"device", device.name()},
		{"gpu", physical_gpu(gpus, device)}};
}

// The build as JSON, with the CPU kernels' library, which lives above base/.
nlohmann::json build_json(const BuildInfo& build)
{
	nlohmann::json j = to_json(build);
	j["onednn_version"] = onednn_version();
	j["onednn_isa"] = onednn_isa();
	j["cpu_threads"] = cpu_threads();
	return j;
}

// Several real hosts: what ends a job on time when one of them drops off the network
// (docs/launch-and-observe.md, "Partitions").
void print_partition_advice()
{
	fmt::print("\nacross hosts\n"
		   "  A host that drops off the network: every rank aborts after --stall-abort (default 600 s) and\n"
		   "  exits 5 s later at most. Under mpirun the job then ends only once Open MPI gives up on that\n"
		   "  host's daemon: launch with --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2\n"
		   "  --mca oob_tcp_keepalive_probes 3, and set net.ipv4.tcp_retries2=4 on the host running mpirun\n"
		   "  (Linux's 15 keeps retransmitting for about 15 minutes). Under srun, Slurm ends the step.\n");
}

void print_table(const nlohmann::json& ranks, const BuildInfo& build, const Topology& topology)
{
	fmt::print("tower {} — {} ranks on {} node(s){}\n\n", build.tower_version, topology.size(),
		   topology.node_count(), topology.simulated() ? " (simulated by --ranks-per-node)" : "");
	fmt::print("{:>5} {:>5} {:>10}  {:<24} {:>8}  {:<7} {}\n", "rank", "node", "local_rank", "hostname", "pid",
		   "device", "gpu");
	for (const auto& r : ranks)
		fmt::print("{:>5} {:>5} {:>10}  {:<24} {:>8}  {:<7} {}\n", r["rank"].get<int>(), r["node"].get<int>(),
			   r["local_rank"].get<int>(), r["hostname"].get<std::string>(), r["pid"].get<long>(),
			   r["device"].get<std::string>(),
			   r["gpu"].get<std::string>().empty() ? "-" : r["gpu"].get<std::string>());
	fmt::print("\nbuild\n");
	fmt::print("  tower          {}\n", build.tower_version);
	fmt::print("  MPI            {} (standard {}), thread level {}\n", build.mpi_library, build.mpi_standard,
		   build.thread_level);
	fmt::print("  CUDA runtime   {} (driver {})\n", build.gpu.cuda_runtime, build.gpu.cuda_driver);
	fmt::print("  cuBLAS         {}\n", build.gpu.cublas);
	fmt::print("  NCCL           {}\n", build.gpu.nccl);
	fmt::print("  GPUs visible   {}{}\n", build.gpu.device_count,
		   build.gpu.device_count == 0 ? fmt::format(" ({})", build.gpu.why_none) : "");
	fmt::print("  oneDNN         {} ({} kernels, {} thread(s) per rank)\n", onednn_version(), onednn_isa(),
		   cpu_threads());
	if (topology.node_count() > 1 && !topology.simulated())
		print_partition_advice();
}

int run_info(World& world, const InfoOptions& options)
{
	const Topology topology(world.comm(), ranks_per_node_setting(options.ranks_per_node));
	const BuildInfo build = collect_build_info(world);
	const Device device = assign_device(topology, build.gpu, parse_device_preference(options.device));

	const auto rows = gather_strings(world.comm(), rank_row(topology, device, build.gpu).dump());
	if (world.rank() != 0)
		return 0;
	nlohmann::json ranks = nlohmann::json::array();
	for (const auto& row : rows)
		ranks.push_back(nlohmann::json::parse(row));
	if (options.json)
		fmt::print("{}\n", nlohmann::json{{"ranks", ranks}, {"build", build_json(build)}}.dump(2));
	else
		print_table(ranks, build, topology);
	std::fflush(stdout);
	return 0;
}

} // namespace

Command add_info_command(CLI::App& parent)
{
	auto options = std::make_shared<InfoOptions>();
	CLI::App* app = parent.add_subcommand("info", "Show where each rank runs and what tower was built with");
	app->add_option("--ranks-per-node", options->ranks_per_node,
			"Group consecutive ranks into simulated nodes of this many ranks (env TOWER_RANKS_PER_NODE)")
		->check(CLI::PositiveNumber);
	app->add_option("--device", options->device, "Device for each rank's tower: auto, cpu or cuda")
		->check(CLI::IsMember({"auto", "cpu", "cuda"}));
	app->add_flag("--json", options->json, "Print one JSON object on rank 0 instead of a table");
	return {app, [options](World& world) { return run_info(world, *options); }};
}

} // namespace tower::cli
