// N-rank replicated training must match 1-rank training at the same global batch, for every mode.
#include <cmath>
#include <random>

#include <doctest/doctest.h>

#include "models/data/batch_assembler.h"
#include "models/data/sampler.h"
#include "models/model_factory.h"
#include "optim/optimizer.h"
#include "runtime/error.h"
#include "runtime/replicated_builder.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

constexpr int64_t per_rank_batch = 8;
constexpr int steps = 50;

// A small learnable data set: each class lights up its own band of pixels, plus noise.
Dataset synthetic_dataset(int64_t count)
{
	Dataset d;
	d.count = count;
	d.rows = d.cols = 28;
	d.images.resize(static_cast<size_t>(count * 28 * 28));
	d.labels.resize(static_cast<size_t>(count));
	std::mt19937 gen(1234);
	std::uniform_real_distribution<float> noise(0.0f, 0.3f);
	for (int64_t i = 0; i < count; ++i) {
		const int32_t label = static_cast<int32_t>(gen() % 10);
		d.labels[static_cast<size_t>(i)] = label;
		for (int64_t p = 0; p < 784; ++p)
			d.images[static_cast<size_t>(i * 784 + p)] = noise(gen) + ((p / 78) == label ? 0.7f : 0.0f);
	}
	return d;
}

struct Trained {
	std::vector<std::vector<float>> parameters;
	uint64_t hash = 0;
};

Trained train(const Topology& topology, int64_t batch, const ReplicatedOptions& options, const Dataset& data)
{
	const Device cpu;
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	auto optimizer = make_optimizer({}, model->parameters()); // momentum 0.9
	ReplicatedBuilder builder(topology, cpu, *model, *optimizer, options);
	DistributedSampler sampler(data.count, batch, topology.rank(), topology.size(), 99);
	BatchAssembler assembler(data, batch, cpu);
	for (int s = 0; s < steps; ++s) {
		const int64_t epoch = s / sampler.steps_per_epoch();
		const Batch& b = assembler.assemble(sampler.shard(epoch, s % sampler.steps_per_epoch()));
		builder.step(b.images, b.labels, 0.05f);
	}
	Trained out;
	out.hash = builder.check_replicas();
	for (Parameter* p : model->parameters())
		out.parameters.push_back(p->value.to_host_f32());
	return out;
}

// ||a - b|| / ||b|| for each tensor; the largest.
double max_relative_difference(const Trained& a, const Trained& b)
{
	double worst = 0;
	for (size_t t = 0; t < a.parameters.size(); ++t) {
		double diff = 0, norm = 0;
		for (size_t i = 0; i < a.parameters[t].size(); ++i) {
			const double d = static_cast<double>(a.parameters[t][i]) - b.parameters[t][i];
			diff += d * d;
			norm += static_cast<double>(b.parameters[t][i]) * b.parameters[t][i];
		}
		worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-30)));
	}
	return worst;
}

void check_matches_one_rank(const ReplicatedOptions& options, std::optional<int> ranks_per_node)
{
	const Dataset data = synthetic_dataset(1200);
	const Topology topology(world().comm(), ranks_per_node);
	const Trained many = train(topology, per_rank_batch, options, data);

	const Topology alone(MPI_COMM_SELF, std::nullopt);
	const Trained one = train(alone, per_rank_batch * world().size(), options, data);

	CHECK(max_relative_difference(many, one) <= 1e-5);
	CHECK(many.parameters.size() == one.parameters.size());
}

} // namespace

TEST_CASE("N ranks match one rank at the same global batch, every mode, overlap on and off")
{
	for (const char* mode : {"ring", "hierarchical", "naive"})
		for (bool overlap : {true, false}) {
			CAPTURE(mode);
			CAPTURE(overlap);
			ReplicatedOptions o;
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
	ReplicatedOptions o;
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
	CHECK_THROWS_WITH_AS(ReplicatedBuilder(topology, cpu, *model, *optimizer, {}),
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
	ReplicatedBuilder builder(topology, cpu, *model, *optimizer, {});
	CHECK_NOTHROW(builder.check_replicas());
	const auto mine = model->parameters();
	const auto theirs = reference->parameters();
	for (size_t i = 0; i < mine.size(); ++i)
		CHECK(mine[i]->value.to_host_f32() == theirs[i]->value.to_host_f32());
	for (auto& s : optimizer->state())
		if (s.tensor.dtype() == DType::f32)
			for (float v : s.tensor.to_host_f32())
				REQUIRE(v == 1.0f);
}
