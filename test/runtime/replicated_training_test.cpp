// N-rank replicated training must match 1-rank training at the same global batch, for every mode.
#include <doctest/doctest.h>

#include "models/model_factory.h"
#include "optim/optimizer.h"
#include "runtime/base/error.h"
#include "runtime/replicated_builder.h"
#include "test/harness/mpi_main.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::world;

namespace {

using tower::test::RunSpec;
using tower::test::Trained;

constexpr int64_t per_rank_batch = 8;

void check_matches_one_rank(const ReplicatedOptions& options, std::optional<int> ranks_per_node)
{
	const Dataset data = tower::test::synthetic_dataset(1200);
	RunSpec spec;
	spec.options = options;
	spec.batch = per_rank_batch;
	const Topology topology(world().comm(), ranks_per_node);
	const Trained many = tower::test::run_training(topology, spec, data);

	spec.batch = per_rank_batch * world().size();
	const Topology alone(MPI_COMM_SELF, std::nullopt);
	const Trained one = tower::test::run_training(alone, spec, data);

	CHECK(tower::test::max_relative_difference(many.parameters, one.parameters) <= 1e-5);
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
