// Gradient hygiene in the engine: non-finite skips, loss scaling, accumulation, sum/mean, subgroups.
#include <cmath>
#include <numeric>

#include <doctest/doctest.h>

#include "runtime/strategies/fault_injection.h"
#include "runtime/options/names.h"
#include "data/batch_assembler.h"
#include "base/mpi/mpi_check.h"
#include "test/harness/mpi_main.h"
#include "test/runtime/reference_mlp.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::RunSpec;
using tower::test::Trained;
using tower::test::world;

namespace {

std::vector<std::vector<float>> values(const tower::test::ModelEngine& engine)
{
	std::vector<std::vector<float>> out;
	for (const auto& t : engine.parameter_tensors())
		out.push_back(t.tensor.to_host_f32());
	return out;
}

// The log2 scale a clean step (or an overflow) leads to: the state is kept in f32.
double next_log2(double log2, bool overflow)
{
	return static_cast<float>(log2 + (overflow ? -1.0 : 0.0005));
}

// a - b, tensor by tensor: with b the initial parameters, what training changed.
std::vector<std::vector<float>> minus(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b)
{
	REQUIRE(a.size() == b.size());
	std::vector<std::vector<float>> out(a.size());
	for (size_t t = 0; t < a.size(); ++t) {
		REQUIRE(a[t].size() == b[t].size());
		for (size_t i = 0; i < a[t].size(); ++i)
			out[t].push_back(a[t][i] - b[t][i]);
	}
	return out;
}

const Dataset& data()
{
	// Large enough that no run below crosses an epoch boundary, where batch sizes drop different tails.
	static const Dataset d = tower::test::synthetic_dataset(4096);
	return d;
}

} // namespace

TEST_CASE("a NaN on one rank makes every rank skip that step, lower the scale, and go on, overlapped or not")
{
	const int bad_step = 5;
	for (bool overlap : {true, false}) {
		CAPTURE(overlap);
		RunSpec spec;
		spec.steps = 40;
		spec.options.overlap = overlap;
		spec.options.loss_scale = parse_loss_scale("dynamic");
		spec.options.faults.nonfinite_step = bad_step;
		spec.options.faults.nonfinite_rank = world().size() - 1;
		std::vector<std::vector<float>> before;
		std::vector<StepStats> seen;
		spec.after_step = [&](const tower::test::ModelEngine& b, const StepStats& s, int step) {
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
		// The log2 scale sits near 64, where f32 steps by 2^-18 and doctest's default relative
		// tolerance (about 7.6e-4 there) would swallow the 0.0005 growth per clean step: the
		// scale each step used is checked exactly, from the first on.
		CHECK(seen.front().loss_scale_log2 == 64.0);
		for (size_t s = 0; s + 1 < seen.size(); ++s) {
			CAPTURE(s);
			CHECK(seen[s + 1].loss_scale_log2 == next_log2(seen[s].loss_scale_log2, seen[s].skipped));
		}
		CHECK(seen[bad_step + 1].loss_scale_log2 - seen[bad_step].loss_scale_log2 == doctest::Approx(-1.0));
		CHECK(seen[bad_step + 2].loss_scale_log2 > seen[bad_step + 1].loss_scale_log2);
		CHECK(t.last_loss < 0.6f * seen.front().forward.loss);
	}
}

TEST_CASE("a static loss scale in f32 changes nothing but the scale")
{
	RunSpec spec;
	spec.steps = 20;
	const Topology topology(world().comm(), std::nullopt);
	const Trained plain = tower::test::run_training(topology, spec, data());
	spec.options.loss_scale = parse_loss_scale("static:1024");
	int steps = 0;
	spec.after_step = [&](const tower::test::ModelEngine& b, const StepStats& s, int) {
		CHECK(s.loss_scale_log2 == 10.0);
		CHECK(b.loss_scaler().scale() == 1024.0f);
		CHECK_FALSE(s.skipped);
		++steps;
	};
	const Trained scaled = tower::test::run_training(topology, spec, data());
	CHECK(steps == spec.steps);
	CHECK(tower::test::max_relative_difference(scaled.parameters, plain.parameters) <= 1e-6);
}

TEST_CASE("a static loss scale reaches the loss gradient: 2^20 overflows f16 and every step is skipped")
{
	// In f32 a scale that is applied and one that is ignored give the same parameters; in f16
	// the scaled loss gradient (scale / batch = 2^17) is past f16's largest value, 65504.
	RunSpec spec;
	spec.steps = 4;
	spec.model.precision = DType::f16;
	std::vector<bool> skipped;
	spec.after_step = [&](const tower::test::ModelEngine&, const StepStats& s, int) { skipped.push_back(s.skipped); };
	const Topology topology(world().comm(), std::nullopt);
	tower::test::run_training(topology, spec, data());
	CHECK(skipped == std::vector<bool>(4, false)); // unscaled, f16 trains

	skipped.clear();
	spec.options.loss_scale = parse_loss_scale("static:1048576");
	const Trained scaled = tower::test::run_training(topology, spec, data());
	CHECK(skipped == std::vector<bool>(4, true));
	auto initial = make_model(spec.model, Device{});
	CHECK(scaled.parameters == tower::test::parameter_values(*initial));
}

TEST_CASE("accumulating 4 micro-batches of 8 per rank equals one batch of 32 per rank on one rank")
{
	for (const char* mode : {"ring", "hierarchical", "naive"}) {
		INFO("mode := ", std::string(mode));
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

TEST_CASE("gradients compressed to bf16 or f16 in transit train like f32, move half the bytes, ring and hierarchical")
{
	const Device cpu;
	auto initial_model = make_model(RunSpec{}.model, cpu);
	const auto initial = tower::test::parameter_values(*initial_model);
	size_t parameter_bytes = 0;
	for (const auto& t : initial)
		parameter_bytes += t.size() * sizeof(float);
	for (const char* mode : {"ring", "hierarchical"}) {
		INFO("mode := ", std::string(mode));
		RunSpec spec;
		spec.steps = 30;
		spec.options.mode = parse_all_reduce_mode(mode);
		size_t gradient_bytes = 0;
		spec.after_step = [&](const tower::test::ModelEngine& b, const StepStats& s, int) {
			gradient_bytes = b.bytes_per_step();
			CHECK(gradient_bytes >= parameter_bytes); // f32, padding included
			CHECK(b.bytes_moved_per_step() == gradient_bytes);
			CHECK(s.allreduce_bytes == gradient_bytes);
		};
		const Topology topology(world().comm(), std::nullopt);
		const Trained plain = tower::test::run_training(topology, spec, data());
		// Whole-parameter norms are dominated by the initial weights: compare what training changed.
		const auto plain_update = minus(plain.parameters, initial);
		for (DType low : {DType::bf16, DType::f16}) {
			CAPTURE(dtype_name(low));
			spec.options.compress = low;
			spec.after_step = [&](const tower::test::ModelEngine& b, const StepStats& s, int) {
				CHECK(b.bytes_per_step() == gradient_bytes);
				CHECK(b.bytes_moved_per_step() == gradient_bytes / 2);
				CHECK(s.allreduce_bytes == gradient_bytes / 2);
			};
			const Trained compressed = tower::test::run_training(topology, spec, data());
			const double difference =
				tower::test::max_relative_difference(minus(compressed.parameters, initial), plain_update);
			if (world().size() == 1) {
				CHECK(difference == 0); // a group of one reduces nothing, so nothing is rounded
			} else {
				// Rounded in transit, so not the same, yet close.
				CHECK(difference > 0);
				CHECK(difference <= (low == DType::bf16 ? 1e-2 : 2e-3));
			}
			CHECK(compressed.last_loss < 1.2f * plain.last_loss);
		}
	}
}

TEST_CASE("grad_norm is the norm of the reduced, unscaled gradient, sharded or not")
{
	// Each rank's gradient comes from the float64 reference; their mean over ranks and its norm
	// are computed here, in float64.
	// Without a loss scale the sharded update sums the squares while it reduces; with one it
	// scales first and sums after.
	const Device cpu;
	for (const char* mode : {"ring", "hierarchical"})
		for (const char* scale : {"static:1024", "none"}) {
			INFO("mode := ", std::string(mode));
			INFO("loss scale := ", std::string(scale));
			auto model = make_model({"mlp", 16, 1, 3}, cpu);
			auto optimizer = make_optimizer({}, model->parameters());
			ReplicatedEngineOptions options;
			options.mode = parse_all_reduce_mode(mode);
			options.fusion_mb = 0.01;
			options.loss_scale = parse_loss_scale(scale); // the norm is of the unscaled gradient
			const Topology topology(world().comm(), std::nullopt);
			tower::test::ModelEngine engine(topology, cpu, *model, *optimizer, options);
			CHECK(engine.update_is_sharded() == (std::string(mode) == "hierarchical" && world().size() > 1));
			BatchAssembler assembler(data(), 8, cpu);
			for (int64_t step = 0; step < 3; ++step) {
				CAPTURE(step);
				std::vector<int64_t> indices(8);
				std::iota(indices.begin(), indices.end(), 8 * (step * world().size() + world().rank()));
				std::vector<int32_t> labels;
				for (int64_t i : indices)
					labels.push_back(data().labels[static_cast<size_t>(i)]);
				const ImageBatch& b = assembler.assemble(indices);
				const auto mine = tower::test::reference_mlp_from(tower::test::parameter_values(*model), 784)
							  .forward_backward(b.images.to_host_f32(), labels);
				std::vector<double> flat;
				for (size_t l = 0; l < mine.weight_grads.size(); ++l) {
					flat.insert(flat.end(), mine.weight_grads[l].begin(), mine.weight_grads[l].end());
					flat.insert(flat.end(), mine.bias_grads[l].begin(), mine.bias_grads[l].end());
				}
				TOWER_MPI(MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(flat.size()), MPI_DOUBLE, MPI_SUM,
							world().comm()));
				double squares = 0;
				for (double g : flat)
					squares += (g / world().size()) * (g / world().size());
				const StepStats stats = engine.step(b.images, b.labels, 0.1f);
				CHECK(stats.grad_norm == doctest::Approx(std::sqrt(squares)).epsilon(1e-5));
			}
		}
}
