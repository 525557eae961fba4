// Gradient hygiene in the builder: non-finite skips, loss scaling, accumulation, sum/mean, subgroups.
#include <cmath>

#include <doctest/doctest.h>

#include "test/harness/mpi_main.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::RunSpec;
using tower::test::Trained;
using tower::test::world;

namespace {

std::vector<std::vector<float>> values(const ReplicatedBuilder& builder)
{
	std::vector<std::vector<float>> out;
	for (const auto& t : builder.parameter_tensors())
		out.push_back(t.tensor.to_host_f32());
	return out;
}

const Dataset& data()
{
	// Large enough that no run below crosses an epoch boundary, where batch sizes drop different tails.
	static const Dataset d = tower::test::synthetic_dataset(4096);
	return d;
}

} // namespace

TEST_CASE("a NaN on one rank makes every rank skip that step, lower the scale, and go on")
{
	const int bad_step = 5;
	RunSpec spec;
	spec.steps = 40;
	spec.options.loss_scale = parse_loss_scale("dynamic");
	spec.options.inject_nonfinite_step = bad_step;
	spec.options.inject_nonfinite_rank = world().size() - 1;
	std::vector<std::vector<float>> before;
	std::vector<StepStats> seen;
	spec.after_step = [&](const ReplicatedBuilder& b, const StepStats& s, int step) {
		seen.push_back(s);
		if (step == bad_step - 1)
			before = values(b);
		if (step == bad_step)
			CHECK(values(b) == before); // bitwise: the update was skipped here
	};
	const Topology topology(world().comm(), std::nullopt);
	const Trained t = tower::test::run_training(topology, spec, data());
	REQUIRE(seen.size() == 40);
	for (int s = 0; s < 40; ++s) {
		CAPTURE(s);
		CHECK(seen[static_cast<size_t>(s)].skipped == (s == bad_step));
	}
	CHECK(std::isnan(seen[bad_step].grad_norm));
	// The scale the next step used is one log2 unit lower; clean steps raise it by 0.0005.
	CHECK(seen[bad_step + 1].loss_scale_log2 == doctest::Approx(seen[bad_step].loss_scale_log2 - 1.0));
	CHECK(seen[bad_step + 2].loss_scale_log2 == doctest::Approx(seen[bad_step + 1].loss_scale_log2 + 0.0005));
	CHECK(t.last_loss < 0.6f * seen.front().forward.loss);
}

TEST_CASE("a static loss scale in f32 changes nothing but the scale")
{
	RunSpec spec;
	spec.steps = 20;
	const Topology topology(world().comm(), std::nullopt);
	const Trained plain = tower::test::run_training(topology, spec, data());
	spec.options.loss_scale = parse_loss_scale("static:1024");
	const Trained scaled = tower::test::run_training(topology, spec, data());
	CHECK(tower::test::max_relative_difference(scaled.parameters, plain.parameters) <= 1e-6);
}

TEST_CASE("accumulating 4 micro-batches of 8 per rank equals one batch of 32 per rank on one rank")
{
	for (const char* mode : {"ring", "hierarchical", "naive"}) {
		CAPTURE(mode);
		RunSpec spec;
		spec.steps = 20;
		spec.options.mode = parse_all_reduce_mode(mode);
		spec.batch = 8;
		spec.accumulate = 4;
		const Topology topology(world().comm(), std::nullopt);
		const Trained accumulated = tower::test::run_training(topology, spec, data());

		spec.batch = 32 * world().size();
		spec.accumulate = 1;
		const Topology alone(MPI_COMM_SELF, std::nullopt);
		const Trained one = tower::test::run_training(alone, spec, data());
		CHECK(tower::test::max_relative_difference(accumulated.parameters, one.parameters) <= 1e-5);
	}
}

TEST_CASE("reduce sum is reduce mean times the replicas")
{
	RunSpec spec;
	spec.steps = 10;
	spec.optimizer.name = "sgd";
	const Topology topology(world().comm(), std::nullopt);
	const Trained mean = tower::test::run_training(topology, spec, data());
	spec.options.reduce = ReduceOp::sum;
	spec.lr = spec.lr / static_cast<float>(world().size());
	const Trained sum = tower::test::run_training(topology, spec, data());
	CHECK(tower::test::max_relative_difference(sum.parameters, mean.parameters) <= 1e-5);
}

TEST_CASE("two groups of two reduce separately, mean dividing by the group size")
{
	if (world().size() != 4)
		return;
	RunSpec spec;
	spec.steps = 20;
	spec.options.groups = {{0, 1}, {2, 3}};
	const Topology topology(world().comm(), std::nullopt);
	const Trained grouped = tower::test::run_training(topology, spec, data());

	// Group g saw positions [2g*b, (2g+2)*b) of each global batch: one rank with batch 2b, as
	// rank g of 2, sees the same samples.
	const int group = world().rank() / 2;
	RunSpec reference = spec;
	reference.options.groups = {};
	reference.batch = 2 * spec.batch;
	const Topology alone(MPI_COMM_SELF, std::nullopt);
	const Trained one = tower::test::run_training(alone, reference, data(), group, 2);
	CHECK(tower::test::max_relative_difference(grouped.parameters, one.parameters) <= 1e-5);
}

TEST_CASE("gradients compressed to bf16 or f16 in transit still train like f32")
{
	RunSpec spec;
	spec.steps = 30;
	const Topology topology(world().comm(), std::nullopt);
	const Trained plain = tower::test::run_training(topology, spec, data());
	for (DType low : {DType::bf16, DType::f16}) {
		CAPTURE(dtype_name(low));
		spec.options.compress = low;
		const Trained compressed = tower::test::run_training(topology, spec, data());
		CHECK(tower::test::max_relative_difference(compressed.parameters, plain.parameters) <= 2e-2);
		CHECK(compressed.last_loss < 1.2f * plain.last_loss);
	}
}
