// GPU test: the replicated strategy end to end on CUDA (every all-reduce mode, overlap on and off,
// with and without bf16 compression) against the same training on the CPU backend. Every run goes
// through the collective even at one rank (reduce_alone), so a one-GPU machine drives NCCL, the
// compression casts and the overlap's ordering too.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "base/device/device.h"
#include "runtime/strategies/fault_injection.h"
#include "runtime/observe/timeline.h"
#include "test/harness/mpi_main.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::world;

namespace {

tower::test::RunSpec spec_for(const Device& device, AllReduceMode mode, bool overlap, DType compress)
{
	tower::test::RunSpec spec;
	spec.device = device;
	spec.steps = 30;
	spec.optimizer.name = "momentum";
	spec.options.mode = mode;
	spec.options.overlap = overlap;
	spec.options.compress = compress;
	spec.options.fusion_mb = 0.01; // several buckets, so backward and the all-reduce can overlap
	spec.options.faults.reduce_alone = true;
	return spec;
}

} // namespace

// Tolerances: cuBLAS and oneDNN sum the GEMMs in different orders and the GPU's expf differs
// from the CPU's in the last bit, so f32 runs drift apart by about 1e-6 per step; 30 steps stay
// far below 1e-3, while a gradient read before backward wrote it, or a bucket left unreduced,
// moves the parameters by lr * gradient, about 1e-2 relative and more. With bf16 compression
// both sides round the same reduced gradients to 8 significant bits, but values that differ in
// their last f32 bits can round to neighbouring bf16 values (0.4% apart): 1e-2.
TEST_CASE("replicated training on the GPU matches the CPU backend, every mode, overlap on and off")
{
	const Topology topology(world().comm(), std::nullopt);
	const Device gpu = assign_device(topology, probe_gpu_runtime(), DevicePreference::cuda);
	const Dataset data = tower::test::synthetic_dataset(1200);
	for (DType compress : {DType::f32, DType::bf16}) {
		CAPTURE(dtype_name(compress));
		const auto cpu = tower::test::run_training(topology, spec_for(Device{}, AllReduceMode::ring, true, compress), data);
		const double bound = compress == DType::f32 ? 1e-3 : 1e-2;
		for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::hierarchical, AllReduceMode::naive})
			for (bool overlap : {true, false}) {
				INFO("mode := ", std::string(all_reduce_mode_name(mode)));
				CAPTURE(overlap);
				auto spec = spec_for(gpu, mode, overlap, compress);
				double compute_s = 0, hidden_min = 1, hidden_max = 0;
				spec.after_step = [&](const tower::test::ModelEngine&, const StepStats& s, int) {
					compute_s += s.compute_s;
					hidden_min = std::min(hidden_min, s.hidden_fraction);
					hidden_max = std::max(hidden_max, s.hidden_fraction);
				};
				const auto on_gpu = tower::test::run_training(topology, spec, data);
				CHECK(tower::test::max_relative_difference(on_gpu.parameters, cpu.parameters) < bound);
				CHECK(std::abs(on_gpu.last_loss - cpu.last_loss) < 10 * bound * (1 + std::abs(cpu.last_loss)));
				CHECK(compute_s > 0);
				CHECK(hidden_min >= 0);
				CHECK(hidden_max <= 1);
				if (!overlap)
					CHECK(hidden_max == 0);
			}
	}
}

// The optimizer's host span ends once its kernels are queued; its "optimizer kernels" span comes
// from CUDA events, one per update, on the GPU's clock. The timeline finishes while the engine
// still lives, as in a run: the last update's span, still pending then, must be written too.
TEST_CASE("the timeline shows the optimizer's kernels on the GPU's clock, and every bucket's all-reduce")
{
	const Topology topology(world().comm(), std::nullopt);
	const Device gpu = assign_device(topology, probe_gpu_runtime(), DevicePreference::cuda);
	const Dataset data = tower::test::synthetic_dataset(400);
	auto spec = spec_for(gpu, AllReduceMode::ring, true, DType::f32);
	spec.steps = 6;
	char path[256] = {};
	if (world().rank() == 0)
		std::snprintf(path, sizeof path, "/tmp/tower-gpu-timeline-%d.json", static_cast<int>(::getpid()));
	MPI_Bcast(path, sizeof path, MPI_CHAR, 0, world().comm());
	timeline::start(world().comm(), path);
	spec.after_step = [&](const tower::test::ModelEngine&, const StepStats&, int step) {
		if (step == spec.steps - 1)
			timeline::finish(world().comm());
	};
	tower::test::run_training(topology, spec, data);
	CHECK_FALSE(timeline::enabled());
	if (world().rank() == 0) {
		std::ifstream in(path);
		std::stringstream text;
		text << in.rdbuf();
		const nlohmann::json events = nlohmann::json::parse(text.str());
		int kernels = 0, all_reduces = 0;
		for (const auto& e : events) {
			if (e["pid"] != 0)
				continue;
			if (e["name"] == "optimizer kernels") {
				++kernels;
				CHECK(e["args"]["clock"] == "gpu");
				CHECK(e["dur"].get<double>() > 0);
			}
			all_reduces += e["name"] == "all-reduce" ? 1 : 0;
		}
		CHECK(kernels == spec.steps);
		CHECK(all_reduces >= spec.steps * 2); // several buckets at fusion_mb 0.01
		std::remove(path);
	}
}
