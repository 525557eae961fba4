// The update split across a node's replicas must give what every replica computing it whole gives.
#include <doctest/doctest.h>

#include "models/data/batch_assembler.h"
#include "models/model_factory.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "runtime/replicated_builder.h"
#include "test/harness/mpi_main.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::world;

namespace {

using tower::test::RunSpec;
using tower::test::Trained;

Trained train(const RunSpec& base, bool shard, std::optional<int> ranks_per_node)
{
	static const Dataset data = tower::test::synthetic_dataset(1200);
	RunSpec spec = base;
	spec.options.mode = AllReduceMode::hierarchical;
	spec.options.fusion_mb = 0.01; // several buckets, each split into shards
	spec.options.shard_update = shard;
	const Topology topology(world().comm(), ranks_per_node);
	return tower::test::run_training(topology, spec, data);
}

int node_size(std::optional<int> ranks_per_node)
{
	return ranks_per_node.value_or(world().size());
}

} // namespace

TEST_CASE("a sharded update matches the whole update, for momentum and Adam, on one node and on two")
{
	for (const char* optimizer : {"momentum", "adam"})
		for (std::optional<int> ranks_per_node : {std::optional<int>{}, std::optional<int>{2}}) {
			if (ranks_per_node && world().size() % *ranks_per_node != 0)
				continue;
			INFO("optimizer := ", std::string(optimizer));
			CAPTURE(ranks_per_node.value_or(0));
			RunSpec spec;
			spec.steps = 30;
			spec.optimizer.name = optimizer;
			spec.lr = std::string(optimizer) == "adam" ? 0.003f : 0.05f;
			const Trained sharded = train(spec, true, ranks_per_node);
			const Trained whole = train(spec, false, ranks_per_node);
			CHECK(sharded.sharded == (node_size(ranks_per_node) > 1));
			CHECK_FALSE(whole.sharded);
			// Shards move the summation order of 3 or more gradients, nothing else.
			CHECK(tower::test::max_relative_difference(sharded.parameters, whole.parameters) <= 1e-6);
			CHECK(tower::test::max_relative_difference(sharded.optimizer_state, whole.optimizer_state) <= 1e-6);
			CHECK(sharded.optimizer_state.size() == whole.optimizer_state.size());
			if (world().size() == 2 && !ranks_per_node)
				CHECK(sharded.hash == whole.hash); // two ranks: the same sums, bit for bit
		}
}

TEST_CASE("a sharded update matches the whole update with accumulation, a loss scale, sum and subgroups")
{
	RunSpec spec;
	spec.steps = 20;
	spec.accumulate = 2;
	spec.options.loss_scale = parse_loss_scale("static:1024"); // un-scaling multiplies the shards
	spec.options.reduce = ReduceOp::sum;
	spec.lr = 0.01f;
	if (world().size() == 4)
		spec.options.groups = {{0, 1}, {2, 3}};
	const Trained sharded = train(spec, true, std::nullopt);
	const Trained whole = train(spec, false, std::nullopt);
	CHECK(sharded.sharded == (world().size() > 1));
	CHECK(tower::test::max_relative_difference(sharded.parameters, whole.parameters) <= 1e-6);
	CHECK(tower::test::max_relative_difference(sharded.optimizer_state, whole.optimizer_state) <= 1e-6);
}

TEST_CASE("a non-finite gradient makes every rank skip the sharded update")
{
	RunSpec spec;
	spec.steps = 8;
	spec.options.inject_nonfinite_step = 4;
	spec.options.inject_nonfinite_rank = world().size() - 1;
	std::vector<int> skipped;
	spec.after_step = [&](const ReplicatedBuilder&, const StepStats& stats, int step) {
		if (stats.skipped)
			skipped.push_back(step);
	};
	const Trained sharded = train(spec, true, std::nullopt);
	CHECK(skipped == std::vector<int>{4});
	skipped.clear();
	const Trained whole = train(spec, false, std::nullopt);
	CHECK(skipped == std::vector<int>{4});
	CHECK(tower::test::max_relative_difference(sharded.parameters, whole.parameters) <= 1e-6);
}

TEST_CASE("parameters, gradients and optimizer state outlive the builder that sharded them")
{
	const Device cpu;
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	OptimizerConfig config;
	config.name = "adam";
	auto optimizer = make_optimizer(config, model->parameters());
	const Dataset data = tower::test::synthetic_dataset(64);
	std::vector<std::vector<float>> values, state, gradients;
	{
		ReplicatedOptions options;
		options.mode = AllReduceMode::hierarchical;
		const Topology topology(world().comm(), std::nullopt);
		ReplicatedBuilder builder(topology, cpu, *model, *optimizer, options);
		BatchAssembler assembler(data, 8, cpu);
		const std::vector<int64_t> first_eight = {0, 1, 2, 3, 4, 5, 6, 7};
		const Batch& batch = assembler.assemble(first_eight);
		builder.step(batch.images, batch.labels, 0.01f);
		values = tower::test::parameter_values(*model);
		for (Parameter* p : model->parameters())
			gradients.push_back(p->grad.to_host_f32());
		for (const NamedTensor& s : optimizer->state())
			if (s.tensor.dtype() == DType::f32)
				state.push_back(s.tensor.to_host_f32());
	}
	CHECK(tower::test::parameter_values(*model) == values);
	std::vector<std::vector<float>> gradients_after;
	for (Parameter* p : model->parameters())
		gradients_after.push_back(p->grad.to_host_f32());
	CHECK(gradients_after == gradients);
	std::vector<std::vector<float>> after;
	for (const NamedTensor& s : optimizer->state())
		if (s.tensor.dtype() == DType::f32)
			after.push_back(s.tensor.to_host_f32());
	CHECK(after == state);
}
