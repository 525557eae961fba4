// Registers `tower bench` with its options.
#include <memory>

#include "cli/bench/bench.h"
#include "cli/command.h"

namespace tower::cli {

Command add_bench_command(CLI::App& parent)
{
	auto o = std::make_shared<BenchOptions>();
	CLI::App* app = parent.add_subcommand("bench", "Benchmark collectives, nccl-tests style, or fused buckets");
	app->add_option("collective", o->collective, "allreduce, reduce_scatter, all_gather, broadcast, fusion or wait")
		->check(CLI::IsMember({"allreduce", "reduce_scatter", "all_gather", "broadcast", "fusion", "wait"}));
	app->add_option("--mode", o->mode, "All-reduce mode: ring, hierarchical, naive or all")
		->check(CLI::IsMember({"ring", "hierarchical", "naive", "all"}));
	app->add_option("--dtype", o->dtype, "f32, f64, f16, bf16, i32 or i64");
	app->add_option("--op", o->op, "sum, mean, max or min");
	app->add_option("-b,--min-bytes", o->min_bytes, "Smallest size (8, 4K, 256M, 1G)");
	app->add_option("-e,--max-bytes", o->max_bytes, "Largest size");
	app->add_option("-f,--step-factor", o->factor, "Size multiplier between rows");
	app->add_option("--iters", o->iters, "Timed iterations per size")->check(CLI::PositiveNumber);
	app->add_option("--warmup", o->warmup, "Untimed iterations per size")->check(CLI::NonNegativeNumber);
	app->add_option("--ranks-per-node", o->ranks_per_node, "Simulated nodes of this many ranks")
		->check(CLI::PositiveNumber);
	app->add_option("--json", o->json, "Write one JSON object per row to this file (rank 0)");
	app->add_option("--device", o->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
	app->add_option("--fusion-mb", o->fusion_mb, "Bucket threshold for `bench fusion` (0 disables fusion)")
		->check(CLI::NonNegativeNumber);
	app->add_flag("--deterministic", o->deterministic, "All-reduce summing in rank order, as tower train --deterministic");
	return {app, [o](World& world) { return run_bench(world, *o); }};
}

} // namespace tower::cli
