// The update split across a node's replicas must give what every replica computing it whole gives.
#include <cmath>
#include <memory>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/strategies/fault_injection.h"
#include "runtime/options/names.h"
#include "collectives/fusion/bucket_plan.h"
#include "collectives/fusion/pack.h"
#include "data/batch_assembler.h"
#include "models/model_factory.h"
#include "models/kernels/ops.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "base/tensor/memory.h"
#include "base/mpi/mpi_check.h"
#include "runtime/strategies/replicated/replicated_engine.h"
#include "runtime/strategies/replicated/sharded_update.h"
#include "runtime/strategies/strategy.h"
#include "runtime/tower.h"
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

bool sharded_with(const ReplicatedEngineOptions& options, std::optional<int> ranks_per_node)
{
	const Device cpu;
	auto model = make_model({"mlp", 8, 1, 7}, cpu);
	auto optimizer = make_optimizer({}, model->parameters());
	const Topology topology(world().comm(), ranks_per_node);
	tower::test::ModelEngine engine(topology, cpu, *model, *optimizer, options);
	return engine.update_is_sharded();
}

// Small integers, halves and quarters: every sum, product and update below is exact in f32, so
// the sharded result can be compared bit for bit with the one computed here.
float initial_value(size_t i)
{
	return 0.25f * static_cast<float>(static_cast<int>(i % 13) - 6);
}

float gradient_of(size_t i, int rank, int step)
{
	return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3 + static_cast<size_t>(step) * 5) % 11) - 5);
}

// Two momentum steps of ShardedUpdate used directly on tensors of `sizes` elements, one bucket
// each, aligned to `alignment_bytes`, against the same steps written out here.
void check_sharded_steps(const std::vector<int64_t>& sizes, size_t alignment_bytes)
{
	const Device cpu;
	const Topology topology(world().comm(), std::nullopt);
	const std::unique_ptr<AllReduce> all_reduce = make_all_reduce(topology, cpu, AllReduceMode::hierarchical);
	std::vector<TensorSpec> specs;
	for (size_t t = 0; t < sizes.size(); ++t)
		specs.push_back({fmt::format("t{}", t), {sizes[t]}, DType::f32});
	const BucketPlan plan = plan_buckets(specs, 0, alignment_bytes);
	REQUIRE(plan.buckets.size() == sizes.size());
	if (!ShardedUpdate::applies(*all_reduce, plan)) {
		CHECK(world().size() == 1); // one rank per node has nothing to split
		return;
	}
	std::vector<Tensor> storage;
	std::vector<Parameter> parameters(sizes.size());
	for (const Bucket& bucket : plan.buckets) {
		storage.push_back(make_bucket_storage(bucket, cpu, *all_reduce));
		const auto views = bucket_views(bucket, storage.back(), specs);
		for (size_t m = 0; m < bucket.members.size(); ++m)
			parameters[bucket.members[m].tensor].grad = views[m];
	}
	std::vector<Parameter*> pointers;
	for (size_t t = 0; t < sizes.size(); ++t) {
		std::vector<float> v(static_cast<size_t>(sizes[t]));
		for (size_t i = 0; i < v.size(); ++i)
			v[i] = initial_value(i);
		parameters[t].name = specs[t].name;
		parameters[t].value = Tensor::from_host(v, {sizes[t]}, cpu);
		pointers.push_back(&parameters[t]);
	}
	OptimizerConfig config;
	config.name = "momentum";
	config.momentum = 0.5f;
	auto optimizer = make_optimizer(config, pointers);
	ShardedUpdate sharded(*all_reduce, plan, storage, ReduceOp::sum, pointers, *optimizer);

	const float factor = 0.5f, lr = 0.25f;
	std::vector<std::vector<float>> expected_value(sizes.size()), expected_buffer(sizes.size());
	for (size_t t = 0; t < sizes.size(); ++t) {
		expected_value[t].resize(static_cast<size_t>(sizes[t]));
		for (size_t i = 0; i < expected_value[t].size(); ++i)
			expected_value[t][i] = initial_value(i);
		expected_buffer[t].assign(static_cast<size_t>(sizes[t]), 0.0f);
	}
	for (int step = 0; step < 2; ++step) {
		CAPTURE(step);
		double squares = 0;
		for (size_t t = 0; t < sizes.size(); ++t) {
			std::vector<float> g(static_cast<size_t>(sizes[t]));
			for (size_t i = 0; i < g.size(); ++i) {
				g[i] = gradient_of(i, world().rank(), step);
				float reduced = 0;
				for (int r = 0; r < world().size(); ++r)
					reduced += gradient_of(i, r, step);
				reduced *= factor;
				squares += static_cast<double>(reduced) * reduced;
				expected_buffer[t][i] = config.momentum * expected_buffer[t][i] + reduced;
				expected_value[t][i] -= lr * expected_buffer[t][i];
			}
			parameters[t].grad.copy_from(Tensor::from_host(g, {sizes[t]}, cpu));
		}
		for (size_t b = 0; b < plan.buckets.size(); ++b)
			sharded.reduce(b);
		double norm = 0;
		CHECK(sharded.finish(factor, lr, &norm));
		CHECK(norm == doctest::Approx(std::sqrt(squares)).epsilon(1e-12));
		// Every replica holds every shard's update, the ranks with empty shards included.
		for (size_t t = 0; t < sizes.size(); ++t) {
			CAPTURE(t);
			CHECK(parameters[t].value.to_host_f32() == expected_value[t]);
			CHECK(optimizer->parameter_state(t).at(0)->to_host_f32() == expected_buffer[t]);
		}
	}
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
	spec.options.faults.nonfinite_step = 4;
	spec.options.faults.nonfinite_rank = world().size() - 1;
	std::vector<int> skipped;
	spec.after_step = [&](const tower::test::ModelEngine&, const StepStats& stats, int step) {
		if (stats.skipped)
			skipped.push_back(step);
	};
	const Trained sharded = train(spec, true, std::nullopt);
	CHECK(sharded.sharded == (world().size() > 1));
	CHECK(skipped == std::vector<int>{4});
	skipped.clear();
	const Trained whole = train(spec, false, std::nullopt);
	CHECK_FALSE(whole.sharded);
	CHECK(skipped == std::vector<int>{4});
	CHECK(tower::test::max_relative_difference(sharded.parameters, whole.parameters) <= 1e-6);
}

TEST_CASE("parameters, gradients and optimizer state outlive the engine that sharded them")
{
	const Device cpu;
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	OptimizerConfig config;
	config.name = "adam";
	auto optimizer = make_optimizer(config, model->parameters());
	const Dataset data = tower::test::synthetic_dataset(64);
	std::vector<std::vector<float>> values, state, gradients;
	{
		ReplicatedEngineOptions options;
		options.mode = AllReduceMode::hierarchical;
		const Topology topology(world().comm(), std::nullopt);
		tower::test::ModelEngine engine(topology, cpu, *model, *optimizer, options);
		CHECK(engine.update_is_sharded() == (world().size() > 1));
		BatchAssembler assembler(data, 8, cpu);
		const std::vector<int64_t> first_eight = {0, 1, 2, 3, 4, 5, 6, 7};
		const ImageBatch& batch = assembler.assemble(first_eight);
		engine.step(batch.images, batch.labels, 0.01f);
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

TEST_CASE("the ranks of a node share one copy of the variables, written between steps through the engine")
{
	const Device cpu;
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	auto optimizer = make_optimizer({}, model->parameters());
	ReplicatedEngineOptions options;
	options.mode = AllReduceMode::hierarchical;
	const Topology topology(world().comm(), std::nullopt);
	tower::test::ModelEngine engine(topology, cpu, *model, *optimizer, options);
	Parameter& first = *model->parameters().front();
	Tensor& momentum = *optimizer->parameter_state(0).at(0);
	auto value = [](const Tensor& t) { return t.to_host_f32().front(); };
	auto set = [](Tensor& t, float v) { copy_bytes(t.data(), t.device(), &v, Device{}, sizeof v); };
	const float rank = static_cast<float>(world().rank());

	// One rank writes for the node (every rank where each has its own): all of them see it.
	engine.write_variables([&](bool writes) {
		if (writes) {
			set(first.value, 100 + rank);
			set(momentum, 300 + rank);
		}
	});
	CHECK(value(first.value) == 100);
	CHECK(value(momentum) == 300);

	// Inside with_own_variables every rank writes a copy of its own; then node rank 0's is the
	// node's again.
	engine.with_own_variables([&] {
		set(first.value, 200 + rank);
		TOWER_MPI(MPI_Barrier(world().comm()));
		CHECK(value(first.value) == 200 + rank);
	});
	CHECK(value(first.value) == 200);
	CHECK(value(momentum) == 300);

	// And steps go on from there, every rank alike.
	const Dataset data = tower::test::synthetic_dataset(64);
	BatchAssembler assembler(data, 8, cpu);
	const std::vector<int64_t> first_eight = {0, 1, 2, 3, 4, 5, 6, 7};
	const ImageBatch& batch = assembler.assemble(first_eight);
	engine.step(batch.images, batch.labels, 0.01f);
	CHECK(value(first.value) != 200);
	(void)engine.check_replicas();
}

namespace {

// Whether every parameter's working copy is its value rounded to `type`, bit for bit.
bool working_copies_current(Model& model, DType type)
{
	bool all = true;
	for (Parameter* p : model.parameters()) {
		CAPTURE(p->name);
		REQUIRE(p->working.data() != nullptr);
		REQUIRE(p->working.dtype() == type);
		const Tensor rounded = Tensor::empty(p->value.shape(), type, Device{});
		ops_for(Device{}).cast(p->value, rounded, false);
		all = all && p->working.to_host_f32() == rounded.to_host_f32();
	}
	return all;
}

// The averaged evaluation of a replicated run with --ema-decay, sharded or not.
ForwardResult averaged_evaluation(bool shard, DType precision)
{
	const Device cpu;
	auto model = make_model({"mlp", 32, 1, 7, precision}, cpu);
	StrategyOptions o;
	o.name = "replicated";
	o.replicated.mode = AllReduceMode::hierarchical;
	o.replicated.shard_update = shard;
	o.ema_decay = 0.5;
	const Topology topology(world().comm(), std::nullopt);
	auto strategy = std::make_unique<Tower>(topology, cpu, *model, OptimizerConfig{}, o);
	const Dataset data = tower::test::synthetic_dataset(256);
	BatchAssembler assembler(data, 8, cpu);
	for (int64_t s = 0; s < 6; ++s) {
		std::vector<int64_t> rows;
		for (int64_t i = 0; i < 8; ++i)
			rows.push_back((s * 8 * world().size() + world().rank() * 8 + i) % data.count);
		const ImageBatch& b = assembler.assemble(rows);
		strategy->step(b.images, b.labels, 0.05f);
	}
	const std::vector<int64_t> first_eight = {0, 1, 2, 3, 4, 5, 6, 7};
	const ImageBatch& b = assembler.assemble(first_eight);
	strategy->use_averages(true);
	const ForwardResult averaged = strategy->evaluate(b.images, b.labels);
	strategy->use_averages(false);
	return averaged;
}

} // namespace

TEST_CASE("16-bit models: the node's working copy of the weights is what rounding in each forward would give")
{
	for (const DType precision : {DType::bf16, DType::f16}) {
		CAPTURE(dtype_name(precision));
		RunSpec spec;
		spec.steps = 20;
		spec.model.precision = precision;
		const Trained sharded = train(spec, true, std::nullopt);
		const Trained whole = train(spec, false, std::nullopt);
		CHECK(sharded.sharded == (world().size() > 1));
		CHECK(tower::test::max_relative_difference(sharded.parameters, whole.parameters) <= 1e-6);
		if (world().size() == 2)
			CHECK(sharded.hash == whole.hash);

		// Every shard lands in the working copy; values written between steps through the engine
		// (a restore, averages swapped in) are rounded again.
		const Device cpu;
		auto model = make_model({"mlp", 32, 1, 7, precision}, cpu);
		auto optimizer = make_optimizer({}, model->parameters());
		ReplicatedEngineOptions options;
		options.mode = AllReduceMode::hierarchical;
		options.fusion_mb = 0.01;
		const Topology topology(world().comm(), std::nullopt);
		std::unique_ptr<tower::test::ModelEngine> engine =
			std::make_unique<tower::test::ModelEngine>(topology, cpu, *model, *optimizer, options);
		if (!engine->update_is_sharded()) {
			for (Parameter* p : model->parameters())
				CHECK(p->working.data() == nullptr); // layers round for themselves
			continue;
		}
		CHECK(working_copies_current(*model, precision));
		const Dataset data = tower::test::synthetic_dataset(64);
		BatchAssembler assembler(data, 8, cpu);
		const std::vector<int64_t> first_eight = {0, 1, 2, 3, 4, 5, 6, 7};
		const ImageBatch& batch = assembler.assemble(first_eight);
		for (int s = 0; s < 3; ++s)
			engine->step(batch.images, batch.labels, 0.05f);
		CHECK(working_copies_current(*model, precision));
		engine->write_variables([&](bool writes) {
			if (writes)
				for (Parameter* p : model->parameters())
					scale(p->value, 0.5f);
		});
		CHECK(working_copies_current(*model, precision));
		engine->with_own_variables([&] {
			for (Parameter* p : model->parameters())
				scale(p->value, 0.5f);
		});
		CHECK(working_copies_current(*model, precision));
		// Without the engine the copy falls behind: what the checks above would catch.
		TOWER_MPI(MPI_Barrier(world().comm()));
		if (world().rank() == 0)
			for (Parameter* p : model->parameters())
				scale(p->value, 0.5f);
		TOWER_MPI(MPI_Barrier(world().comm()));
		CHECK_FALSE(working_copies_current(*model, precision));
		engine.reset();
		for (Parameter* p : model->parameters())
			CHECK(p->working.data() == nullptr); // gone with the engine: the layers round again
	}
	// The strategy swaps averages in and out around evaluation; both must reach the working copy.
	const ForwardResult sharded = averaged_evaluation(true, DType::bf16);
	const ForwardResult whole = averaged_evaluation(false, DType::bf16);
	CHECK(sharded.loss == doctest::Approx(whole.loss).epsilon(1e-5));
}

TEST_CASE("the update is sharded only where replicas share a node's memory and the buckets stay f32")
{
	ReplicatedEngineOptions o;
	o.mode = AllReduceMode::hierarchical;
	CHECK(sharded_with(o, std::nullopt) == (world().size() > 1));
	CHECK_FALSE(sharded_with(o, 1)); // nodes of one rank: no peer to share with
	o.shard_update = false;
	CHECK_FALSE(sharded_with(o, std::nullopt));
	o.shard_update = true;
	o.compress = DType::bf16; // the buckets that travel are not f32
	CHECK_FALSE(sharded_with(o, std::nullopt));
	for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::naive}) {
		CAPTURE(all_reduce_mode_name(mode));
		o = {};
		o.mode = mode;
		CHECK_FALSE(sharded_with(o, std::nullopt));
	}
}

TEST_CASE("buckets smaller than the node leave some ranks an empty shard, and every replica is still updated")
{
	// 1, 2 and 5 elements in buckets of 2, 2 and 6 (8-byte alignment): fewer elements than the
	// 3 or 4 ranks, all inside node rank 0's first 16-element line.
	check_sharded_steps({1, 2, 5}, 8);
}

TEST_CASE("long shards, uneven across the ranks, are updated whole")
{
	// At 4 ranks the first bucket's shards hold about 40000 elements each, the last rank's
	// fewer; the second bucket gives every rank a little over 16K.
	check_sharded_steps({160037, 16400 * world().size(), 3}, 256);
}
