// N-rank replicated training must match 1-rank training at the same global batch, for every mode.
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/strategies/fault_injection.h"
#include "runtime/options/names.h"
#include "data/batch_assembler.h"
#include "models/model_factory.h"
#include "optim/optimizer.h"
#include "base/error.h"
#include "runtime/strategies/replicated/replicated_engine.h"
#include "runtime/tower.h"
#include "test/harness/mpi_main.h"
#include "test/runtime/reference_mlp.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::world;

namespace {

using tower::test::RunSpec;
using tower::test::Trained;

constexpr int64_t per_rank_batch = 8;

double mean_of(const std::vector<float>& v, size_t first, size_t count)
{
	return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(first),
			       v.begin() + static_cast<std::ptrdiff_t>(first + count), 0.0) /
	       static_cast<double>(count);
}

void check_matches_one_rank(RunSpec spec, std::optional<int> ranks_per_node)
{
	const Dataset data = tower::test::synthetic_dataset(1200);
	std::vector<float> losses;
	spec.after_step = [&](const tower::test::ModelEngine&, const StepStats& s, int) { losses.push_back(s.forward.loss); };
	spec.batch = per_rank_batch;
	const Topology topology(world().comm(), ranks_per_node);
	const Trained many = tower::test::run_training(topology, spec, data);

	spec.after_step = {};
	spec.batch = per_rank_batch * world().size();
	const Topology alone(MPI_COMM_SELF, std::nullopt);
	const Trained one = tower::test::run_training(alone, spec, data);

	CHECK(tower::test::max_relative_difference(many.parameters, one.parameters) <= 1e-5);
	// Agreement alone would pass a step that did nothing: training must have moved the
	// parameters and lowered the loss (this rank's, over the first and the last 5 steps).
	const Device cpu;
	auto initial = make_model(spec.model, cpu);
	CHECK(tower::test::max_relative_difference(many.parameters, tower::test::parameter_values(*initial)) > 0.05);
	REQUIRE(losses.size() == static_cast<size_t>(spec.steps));
	CHECK(mean_of(losses, losses.size() - 5, 5) < 0.5 * mean_of(losses, 0, 5));
}

void check_matches_one_rank(const ReplicatedEngineOptions& options, std::optional<int> ranks_per_node)
{
	RunSpec spec;
	spec.options = options;
	check_matches_one_rank(spec, ranks_per_node);
}

// ||a - b|| / ||b|| of one tensor, the library's f32 against the reference's f64.
double relative_difference(const std::vector<float>& a, const std::vector<double>& b)
{
	REQUIRE(a.size() == b.size());
	double diff = 0, norm = 0;
	for (size_t i = 0; i < a.size(); ++i) {
		diff += (a[i] - b[i]) * (a[i] - b[i]);
		norm += b[i] * b[i];
	}
	return std::sqrt(diff / norm);
}

// The i32 labels of the samples at `indices`.
std::vector<int32_t> labels_of(const Dataset& data, const std::vector<int64_t>& indices)
{
	std::vector<int32_t> out;
	for (int64_t i : indices)
		out.push_back(data.labels[static_cast<size_t>(i)]);
	return out;
}

std::vector<int64_t> consecutive(int64_t first, int64_t count)
{
	std::vector<int64_t> out(static_cast<size_t>(count));
	std::iota(out.begin(), out.end(), first);
	return out;
}

} // namespace

TEST_CASE("N ranks match one rank at the same global batch, every mode, overlap on and off")
{
	for (const char* mode : {"ring", "hierarchical", "naive"})
		for (bool overlap : {true, false}) {
			INFO("mode := ", std::string(mode));
			CAPTURE(overlap);
			ReplicatedEngineOptions o;
			o.mode = parse_all_reduce_mode(mode);
			o.overlap = overlap;
			o.fusion_mb = 0.01; // several buckets even for this small model
			check_matches_one_rank(o, std::nullopt);
		}
}

TEST_CASE("hierarchical training on simulated nodes of 2 matches one rank")
{
	if (world().size() % 2 != 0)
		return;
	ReplicatedEngineOptions o;
	o.mode = AllReduceMode::hierarchical;
	check_matches_one_rank(o, 2);
}

TEST_CASE("a rank with a different model is an error on every rank, not a hang")
{
	if (world().size() < 2)
		return;
	const Device cpu;
	const bool odd_one = world().rank() == world().size() - 1;
	auto model = make_model({"mlp", odd_one ? 16 : 32, 1, 7}, cpu);
	auto optimizer = make_optimizer({}, model->parameters());
	const Topology topology(world().comm(), std::nullopt);
	CHECK_THROWS_WITH_AS(tower::test::ModelEngine(topology, cpu, *model, *optimizer, {}),
			     doctest::Contains("gradient list"), AgreedError);
}

TEST_CASE("after construction every rank holds rank 0's parameters and optimizer state")
{
	const Device cpu;
	// Each rank starts from a different seed and different optimizer state; the post-init
	// broadcast must leave every rank with rank 0's.
	auto model = make_model({"mlp", 32, 1, static_cast<uint64_t>(100 + world().rank())}, cpu);
	auto reference = make_model({"mlp", 32, 1, 100}, cpu);
	auto optimizer = make_optimizer({}, model->parameters());
	for (auto& s : optimizer->state())
		if (s.tensor.dtype() == DType::f32)
			s.tensor.copy_from(Tensor::from_host(std::vector<float>(static_cast<size_t>(s.tensor.numel()),
									      static_cast<float>(world().rank() + 1)),
							     s.tensor.shape(), cpu));
	const Topology topology(world().comm(), std::nullopt);
	tower::test::ModelEngine engine(topology, cpu, *model, *optimizer, {});
	CHECK_NOTHROW(engine.check_replicas());
	const auto mine = model->parameters();
	const auto theirs = reference->parameters();
	for (size_t i = 0; i < mine.size(); ++i)
		CHECK(mine[i]->value.to_host_f32() == theirs[i]->value.to_host_f32());
	for (auto& s : optimizer->state())
		if (s.tensor.dtype() == DType::f32)
			for (float v : s.tensor.to_host_f32())
				REQUIRE(v == 1.0f);
}

TEST_CASE("with fusion_mb 0 every gradient gets a bucket of its own, and N ranks still match one rank")
{
	RunSpec spec;
	spec.options.fusion_mb = 0;
	bool checked = false;
	const Device cpu;
	const size_t tensors = make_model(spec.model, cpu)->parameters().size();
	const Dataset data = tower::test::synthetic_dataset(64);
	spec.steps = 1;
	spec.after_step = [&](const tower::test::ModelEngine& b, const StepStats&, int) {
		REQUIRE(b.plan().buckets.size() == tensors);
		for (const Bucket& bucket : b.plan().buckets)
			CHECK(bucket.members.size() == 1);
		checked = true;
	};
	const Topology topology(world().comm(), std::nullopt);
	tower::test::run_training(topology, spec, data);
	CHECK(checked);

	RunSpec train;
	train.options.fusion_mb = 0;
	check_matches_one_rank(train, std::nullopt);
}

TEST_CASE("bad engine options are an error on every rank that names the option and the fix")
{
	const Device cpu;
	auto model = make_model({"mlp", 16, 1, 7}, cpu);
	auto optimizer = make_optimizer({}, model->parameters());
	const Topology topology(world().comm(), std::nullopt);
	ReplicatedEngineOptions o;
	o.compress = DType::i32;
	CHECK_THROWS_WITH_AS(tower::test::ModelEngine(topology, cpu, *model, *optimizer, o),
			     "`compress` i32: gradients travel as f32 (none), f16 or bf16", AgreedError);
	o = {};
	o.fusion_mb = -1;
	CHECK_THROWS_WITH_AS(tower::test::ModelEngine(topology, cpu, *model, *optimizer, o),
			     "`fusion_mb` -1 is negative; use 0 to disable fusion or a size in MiB", AgreedError);
}

TEST_CASE("one rank's step is the float64 forward, backward and momentum update written out here")
{
	// Every other test compares the engine with itself at another rank count; this one
	// compares it with the model's definition: x W^T + b, ReLU, mean softmax cross-entropy,
	// buf = 0.9 buf + g, p -= lr buf.
	const Device cpu;
	const Dataset data = tower::test::synthetic_dataset(256);
	const int64_t batch = 16;
	const float lr = 0.1f;
	for (int64_t depth : {1, 2}) {
		CAPTURE(depth);
		auto model = make_model({"mlp", 16, depth, 11}, cpu);
		tower::test::ReferenceMlp reference =
			tower::test::reference_mlp_from(tower::test::parameter_values(*model), 784);
		OptimizerConfig momentum;
		momentum.name = "momentum";
		momentum.momentum = 0.9f;
		auto optimizer = make_optimizer(momentum, model->parameters());
		const Topology alone(MPI_COMM_SELF, std::nullopt);
		tower::test::ModelEngine engine(alone, cpu, *model, *optimizer, {});
		BatchAssembler assembler(data, batch, cpu);
		for (int64_t s = 0; s < 8; ++s) {
			CAPTURE(s);
			const auto indices = consecutive(s * batch, batch);
			const ImageBatch& b = assembler.assemble(indices);
			const auto expected = reference.forward_backward(b.images.to_host_f32(), labels_of(data, indices));
			const StepStats stats = engine.step(b.images, b.labels, lr);
			CHECK(stats.forward.loss == doctest::Approx(expected.loss).epsilon(1e-5));
			CHECK(stats.forward.correct == expected.correct);
			double squares = 0;
			for (const auto* grads : {&expected.weight_grads, &expected.bias_grads})
				for (const auto& g : *grads)
					for (double v : g)
						squares += v * v;
			CHECK(stats.grad_norm == doctest::Approx(std::sqrt(squares)).epsilon(1e-5));
			reference.step(expected, lr, 0.9);
		}
		const auto mine = tower::test::parameter_values(*model);
		const auto theirs = reference.parameters();
		REQUIRE(mine.size() == theirs.size());
		for (size_t t = 0; t < mine.size(); ++t) {
			CAPTURE(t);
			CHECK(relative_difference(mine[t], theirs[t]) <= 1e-5);
		}
	}
}

TEST_CASE("evaluate returns the batch's loss and correct count and changes no parameter or gradient")
{
	const Device cpu;
	const Dataset data = tower::test::synthetic_dataset(256);
	auto model = make_model({"mlp", 16, 1, 5}, cpu);
	auto optimizer = make_optimizer({}, model->parameters());
	const Topology topology(world().comm(), std::nullopt);
	tower::test::ModelEngine engine(topology, cpu, *model, *optimizer, {});
	BatchAssembler assembler(data, 16, cpu);
	for (int64_t s = 0; s < 3; ++s) {
		const ImageBatch& b = assembler.assemble(consecutive(16 * (s * world().size() + world().rank()), 16));
		engine.step(b.images, b.labels, 0.1f);
	}
	const auto values = tower::test::parameter_values(*model);
	std::vector<std::vector<float>> gradients;
	for (Parameter* p : model->parameters())
		gradients.push_back(p->grad.to_host_f32());

	const auto indices = consecutive(200, 16);
	const ImageBatch& b = assembler.assemble(indices);
	const ForwardResult result = engine.evaluate(b.images, b.labels);
	const auto expected = tower::test::reference_mlp_from(values, 784)
				      .forward_backward(b.images.to_host_f32(), labels_of(data, indices));
	CHECK(result.loss == doctest::Approx(expected.loss).epsilon(1e-5));
	CHECK(result.correct == expected.correct);
	CHECK(tower::test::parameter_values(*model) == values);
	std::vector<std::vector<float>> gradients_after;
	for (Parameter* p : model->parameters())
		gradients_after.push_back(p->grad.to_host_f32());
	CHECK(gradients_after == gradients);
}

TEST_CASE("a rank whose parameters differ makes check_replicas fail on every rank, naming it and the tensor")
{
	if (world().size() < 2)
		return;
	const Device cpu;
	auto model = make_model({"mlp", 16, 1, 7}, cpu);
	auto optimizer = make_optimizer({}, model->parameters());
	const Topology topology(world().comm(), std::nullopt);
	tower::test::ModelEngine engine(topology, cpu, *model, *optimizer, {});
	CHECK_NOTHROW(engine.check_replicas());
	// The second tensor, so naming merely the first would be wrong.
	const int odd_one = world().size() - 1;
	Parameter& bias = *model->parameters().at(1);
	REQUIRE(bias.name == "fc1.bias");
	if (world().rank() == odd_one) {
		auto v = bias.value.to_host_f32();
		v[3] += 1.0f;
		bias.value.copy_from(Tensor::from_host(v, bias.value.shape(), cpu));
	}
	CHECK_THROWS_WITH_AS(engine.check_replicas(),
			     fmt::format("rank {}: parameters differ from rank 0's, first in 'fc1.bias'", odd_one).c_str(),
			     AgreedError);
}

TEST_CASE("ranks that start with different loss-scale state all take rank 0's")
{
	const Device cpu;
	auto model = make_model({"mlp", 16, 1, 7}, cpu);
	const Topology topology(world().comm(), std::nullopt);
	StrategyOptions o;
	o.gradients.loss_scale = parse_loss_scale("dynamic");
	o.gradients.loss_scale.log2_init = 10.0 + world().rank();
	DistributedOptimizerSettings unchecked; // the options differ on purpose
	unchecked.check_agreement = false;
	Tower tower(topology, cpu, *model, OptimizerConfig{}, o, unchecked);
	CHECK(tower.loss_scaler().log2_scale() == 10.0);
	const Dataset data = tower::test::synthetic_dataset(64);
	BatchAssembler assembler(data, 8, cpu);
	const ImageBatch& b = assembler.assemble(consecutive(8 * world().rank(), 8));
	const StepStats stats = tower.step(b.images, b.labels, 0.05f);
	CHECK_FALSE(stats.skipped);
	CHECK(stats.loss_scale_log2 == 10.0);
	CHECK(tower.loss_scaler().log2_scale() == static_cast<double>(static_cast<float>(10.0 + 0.0005)));
	CHECK_NOTHROW(tower.check_replicas());
}

TEST_CASE("the engine gives the gradients memory of their own when it goes, and drops them while an exception unwinds")
{
	const Device cpu;
	const Topology topology(world().comm(), std::nullopt);
	auto model = make_model({"mlp", 16, 1, 7}, cpu);
	auto optimizer = make_optimizer({}, model->parameters());
	{
		tower::test::ModelEngine engine(topology, cpu, *model, *optimizer, ReplicatedEngineOptions{});
	}
	for (const Parameter* p : model->parameters()) {
		CAPTURE(p->name);
		CHECK(p->grad.data() != nullptr);
		CHECK(p->grad.shape() == p->value.shape());
	}
	// Unwinding, the copies are not attempted: after a CUDA error they would throw a second
	// exception from a destructor, which ends the program without the first one's message.
	try {
		tower::test::ModelEngine engine(topology, cpu, *model, *optimizer, ReplicatedEngineOptions{});
		throw std::runtime_error("the first error");
	} catch (const std::runtime_error& e) {
		CHECK(std::string(e.what()) == "the first error");
	}
	for (const Parameter* p : model->parameters()) {
		CAPTURE(p->name);
		CHECK(p->grad.data() == nullptr);
	}
}

TEST_CASE("reduce_alone runs the collective and its compression in a group of one")
{
	// Without the switch a group of one skips the collective, so a compressed run equals an f32
	// one bit for bit: a one-GPU test of NCCL, compression or overlap ordering would test nothing.
	const Dataset data = tower::test::synthetic_dataset(400);
	const Topology alone(MPI_COMM_SELF, std::nullopt);
	RunSpec spec;
	spec.steps = 20;
	spec.options.fusion_mb = 0.01;
	const auto run = [&](DType compress, bool reduce_alone) {
		spec.options.compress = compress;
		spec.options.faults.reduce_alone = reduce_alone;
		return tower::test::run_training(alone, spec, data);
	};
	const Trained plain = run(DType::f32, false);
	CHECK(run(DType::bf16, false).hash == plain.hash);
	// f32 through the collective of one rank is the identity, sum or mean.
	CHECK(run(DType::f32, true).hash == plain.hash);
	// bf16 through it rounds every gradient to 8 significant bits: close, but not the same bits.
	const Trained compressed = run(DType::bf16, true);
	CHECK(compressed.hash != plain.hash);
	CHECK(tower::test::max_relative_difference(compressed.parameters, plain.parameters) < 1e-2);
}
