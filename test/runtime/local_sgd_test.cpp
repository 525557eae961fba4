// The local-sgd strategy: H = 1 with outer SGD at rate 1 is the replicated strategy, H > 1 at one
// worker is plain training, its rule with and without overlap against a float64 simulation, the
// workers agree at every sync, the first local_start steps average the gradients, a non-finite inner
// step or pseudo-gradient is skipped where the rules say, and its option errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "data/batch_assembler.h"
#include "data/sampler.h"
#include "models/model_factory.h"
#include "runtime/safety/replica_check.h"
#include "runtime/strategies/local_sgd/local_sgd_strategy.h"
#include "runtime/strategies/fault_injection.h"
#include "runtime/tower.h"
#include "test/harness/mpi_main.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::world;

namespace {

constexpr int64_t batch = 8;
constexpr float lr = 0.05f;

const Dataset& data()
{
	static const Dataset d = tower::test::synthetic_dataset(1200);
	return d;
}

StrategyOptions local_sgd(int64_t h, const char* outer = "sgd", float outer_lr = 1.0f)
{
	StrategyOptions o;
	o.name = "local-sgd";
	o.local_sgd.sync_every = h;
	o.local_sgd.outer_optimizer = outer;
	o.local_sgd.outer_lr = outer_lr;
	return o;
}

struct Run {
	std::vector<std::vector<float>> parameters;
	std::vector<StepStats> stats;
	nlohmann::json details;
};

// `steps` steps of the default MLP over `comm`, each rank on its shard of the same batches. After
// each step `after` sees the tower and the step's number (from 1).
Run train(MPI_Comm comm, const StrategyOptions& options, const OptimizerConfig& optimizer, int steps,
	  const std::function<void(Tower&, int)>& after = {})
{
	const Device cpu;
	const Topology topology(comm, std::nullopt);
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	Tower tower(topology, cpu, *model, optimizer, options);
	DistributedSampler sampler(data().count, batch, topology.rank(), topology.size(), 99);
	BatchAssembler assembler(data(), batch, cpu);
	Run run;
	for (int s = 0; s < steps; ++s) {
		const ImageBatch& b = assembler.assemble(sampler.shard(s / sampler.steps_per_epoch(), s % sampler.steps_per_epoch()));
		run.stats.push_back(tower.step(b.images, b.labels, lr));
		if (after)
			after(tower, s + 1);
	}
	run.parameters = tower::test::parameter_values(*model);
	run.details = tower.optimizer().strategy().describe().details;
	return run;
}

OptimizerConfig inner(const char* name)
{
	OptimizerConfig o;
	o.name = name;
	return o;
}

// Worker r's loss in the simulation below: |x - centre|^2 / 2, a centre of its own.
double centre(int worker, int64_t i)
{
	return 0.5 * (worker + 1) + 0.1 * static_cast<double>(i % 97);
}

// local-sgd's rule in float64, every worker at once, inner plain SGD on the losses above: the
// anchor after `steps` steps and the settle that ends a run.
std::vector<double> simulate_local_sgd(int workers, int64_t n, const LocalSgdOptions& o, double inner_rate, int steps)
{
	std::vector<double> anchor(n, 0.0), momentum(n, 0.0), pending(n, 0.0);
	std::vector<std::vector<double>> x(workers, anchor), start(workers, anchor);
	bool has_pending = false;
	const auto outer = [&](const std::vector<double>& mean) {
		for (int64_t i = 0; i < n; ++i) {
			if (o.outer_optimizer == "sgd") {
				anchor[i] -= o.outer_lr * mean[i];
			} else {
				momentum[i] = o.outer_momentum * momentum[i] + mean[i];
				anchor[i] -= o.outer_lr * (mean[i] + o.outer_momentum * momentum[i]);
			}
		}
	};
	const auto mean_move = [&](const std::vector<std::vector<double>>& from) {
		std::vector<double> mean(n, 0.0);
		for (int r = 0; r < workers; ++r)
			for (int64_t i = 0; i < n; ++i)
				mean[i] += (from[r][i] - x[r][i]) / workers;
		return mean;
	};
	const auto blocking_sync = [&] {
		outer(mean_move(std::vector<std::vector<double>>(workers, anchor)));
		x.assign(workers, anchor);
		start.assign(workers, anchor);
	};
	for (int s = 1; s <= steps; ++s) {
		for (int r = 0; r < workers; ++r)
			for (int64_t i = 0; i < n; ++i)
				x[r][i] -= inner_rate * (x[r][i] - centre(r, i));
		if (has_pending && o.outer_delay > 0 && s % o.sync_every == o.outer_delay) {
			// The mean lands: each worker's moves since its block started go on top of it.
			outer(pending);
			for (int r = 0; r < workers; ++r)
				for (int64_t i = 0; i < n; ++i)
					x[r][i] = anchor[i] - (start[r][i] - x[r][i]);
			start.assign(workers, anchor);
			has_pending = false;
		}
		if (s % o.sync_every != 0)
			continue;
		if (!o.overlap) {
			blocking_sync();
			continue;
		}
		if (has_pending)
			outer(pending);
		pending = mean_move(start);
		has_pending = true;
		for (int r = 0; r < workers; ++r)
			for (int64_t i = 0; i < n; ++i)
				start[r][i] = x[r][i] = anchor[i] - (start[r][i] - x[r][i]);
	}
	if (has_pending) {
		outer(pending);
		for (int r = 0; r < workers; ++r)
			for (int64_t i = 0; i < n; ++i)
				x[r][i] = anchor[i] - (start[r][i] - x[r][i]);
		start.assign(workers, anchor);
	}
	if (steps % o.sync_every != 0)
		blocking_sync();
	return anchor;
}

// Every rank alone: a world of one.
struct OwnWorld {
	MPI_Comm comm = MPI_COMM_NULL;
	OwnWorld() { TOWER_MPI(MPI_Comm_split(world().comm(), world().rank(), 0, &comm)); }
	~OwnWorld() { MPI_Comm_free(&comm); }
};

} // namespace

TEST_CASE("local-sgd with H = 1 and outer SGD at rate 1 is the replicated strategy (mean)")
{
	// The inner rule is linear in the gradient and every worker restarts from the anchor each
	// step, so the mean of the workers' moves is the move of the mean gradient.
	for (const char* name : {"sgd", "momentum"}) {
		CAPTURE(name);
		StrategyOptions replicated;
		const Run reference = train(world().comm(), replicated, inner(name), 20);
		const Run local = train(world().comm(), local_sgd(1), inner(name), 20);
		CHECK(tower::test::max_relative_difference(local.parameters, reference.parameters) <= 1e-6);
		CHECK(local.details["syncs"].get<int64_t>() == 20);
	}
}

TEST_CASE("local-sgd with H > 1 at one worker and outer SGD at rate 1 is plain training, with overlap too")
{
	const OwnWorld alone;
	for (const bool overlap : {false, true}) {
		for (const char* name : {"momentum", "adam"}) {
			CAPTURE(overlap);
			CAPTURE(name);
			StrategyOptions o = local_sgd(6);
			o.local_sgd.overlap = overlap;
			const Run plain = train(alone.comm, StrategyOptions{}, inner(name), 20);
			const Run local = train(alone.comm, o, inner(name), 20);
			CHECK(tower::test::max_relative_difference(local.parameters, plain.parameters) <= 1e-6);
			CHECK(local.details["syncs"].get<int64_t>() == 3);
			CHECK(local.details["outer_overlap"].get<bool>() == overlap);
		}
	}
}

TEST_CASE("local-sgd follows a float64 simulation of its rule, with and without overlap, with a delay")
{
	// Each worker descends its own quadratic, so the workers drift apart between syncs and the
	// anchor depends on every block's mean, on when it is applied and on the outer state. More
	// values than one piece of the overlapped all-reduce.
	const Topology topology(world().comm(), std::nullopt);
	constexpr int64_t n = overlap_piece_values + 1000;
	constexpr float inner_lr = 0.1f;
	// Delay 1 of H = 3: the mean lands a step after its sync; 0: at the next sync.
	for (const auto& [overlap, delay] : {std::pair{false, 0}, {true, 0}, {true, 1}}) {
		for (const char* outer : {"sgd", "nesterov"}) {
			for (const int steps : {12, 14}) { // ending on a sync, and between syncs
				CAPTURE(overlap);
				CAPTURE(delay);
				CAPTURE(outer);
				CAPTURE(steps);
				StrategyOptions o = local_sgd(3, outer, std::string(outer) == "sgd" ? 1.0f : 0.7f);
				o.local_sgd.overlap = overlap;
				o.local_sgd.outer_delay = delay;
				Parameter p{"x", Tensor::zeros({n}, DType::f32, Device{}), Tensor::zeros({n}, DType::f32, Device{}),
					    Tensor{}};
				auto strategy = make_local_sgd_strategy(topology, Device{}, ParameterSet{{&p}}, inner("sgd"), o);
				for (int s = 0; s < steps; ++s) {
					for (int64_t i = 0; i < n; ++i)
						p.grad.data_as<float>()[i] = p.value.data_as<float>()[i] -
									     static_cast<float>(centre(world().rank(), i));
					StepRequest request;
					request.lr = inner_lr;
					strategy->step(request);
				}
				strategy->settle_replicas();
				const std::vector<double> expected =
					simulate_local_sgd(world().size(), n, o.local_sgd, inner_lr, steps);
				double worst = 0;
				for (int64_t i = 0; i < n; ++i)
					worst = std::max(worst, std::abs(p.value.data_as<float>()[i] - expected[i]) /
									std::max(std::abs(expected[i]), 1.0));
				CHECK(worst <= 1e-5);
				strategy->check_replicas();
			}
		}
	}
}

TEST_CASE("local-sgd's workers hold the same model right after every sync, and differ between")
{
	int checked = 0;
	const auto after = [&](Tower& tower, int step) {
		std::vector<NamedTensor> mine;
		for (Parameter* p : tower.model().parameters())
			mine.push_back({p->name, p->value});
		// The anchor always agrees; the workers' own parameters right after each sync.
		tower.check_replicas();
		if (step % 4 == 0) {
			check_replicas_of(world().comm(), mine);
			++checked;
		} else if (world().size() > 1) {
			const std::vector<uint64_t> hash = tensor_hashes(mine);
			uint64_t first = hash[0], lowest = first;
			TOWER_MPI(MPI_Allreduce(&first, &lowest, 1, MPI_UINT64_T, MPI_MIN, world().comm()));
			uint64_t highest = first;
			TOWER_MPI(MPI_Allreduce(&first, &highest, 1, MPI_UINT64_T, MPI_MAX, world().comm()));
			CHECK(lowest != highest); // the workers drifted apart on their own batches
		}
	};
	const Run run = train(world().comm(), local_sgd(4, "nesterov", 0.7f), inner("adamw"), 12, after);
	CHECK(checked == 3);
	CHECK(run.details["syncs"].get<int64_t>() == 3);
	CHECK(run.details["outer_optimizer"] == "nesterov");
}

TEST_CASE("local-sgd's first local_start steps average the gradients, then every H steps sync")
{
	// The warm-up averages the gradients, so its steps are replicated (mean) steps under any inner
	// rule: AdamW here, whose steps each worker took on its own gradient and then averaged would not be.
	StrategyOptions options = local_sgd(5);
	options.local_sgd.local_start = 8;
	const Run reference = train(world().comm(), StrategyOptions{}, inner("adamw"), 8);
	const Run first = train(world().comm(), options, inner("adamw"), 8);
	CHECK(tower::test::max_relative_difference(first.parameters, reference.parameters) <= 1e-6);
	CHECK(first.details["syncs"].get<int64_t>() == 8);
	const Run longer = train(world().comm(), options, inner("adamw"), 18);
	CHECK(longer.details["syncs"].get<int64_t>() == 10); // steps 1 to 8, then 13 and 18
	CHECK(longer.details["local_start"].get<int64_t>() == 8);
	// Under overlap too: those all-reduces block (a mean a step late would leave the workers apart).
	options.local_sgd.overlap = true;
	const Run overlapped = train(world().comm(), options, inner("adamw"), 8);
	CHECK(tower::test::max_relative_difference(overlapped.parameters, reference.parameters) <= 1e-6);
	CHECK(overlapped.details["syncs"].get<int64_t>() == 8);
}

namespace {

// A runs under overlap (H = 3, outer Nesterov) for `a_steps` steps with inner rule `rule`. B loads
// A's state with a longer local_start, so that its next step is a warm-up step: its workers must
// settle as it loads (a mean in flight lands once, each worker's moves carried onto it, then a
// blocking sync where they are still apart) and take the same inner state. C loads A's state
// after A's settle_replicas, which does that same settling, and takes the same warm-up step: B and
// C end on the same bits, and every rank on the same values.
void resume_into_warm_up(int a_steps, const char* rule)
{
	const Topology topology(world().comm(), std::nullopt);
	constexpr int64_t n = 1000;
	StrategyOptions o = local_sgd(3, "nesterov", 0.7f);
	o.local_sgd.overlap = true;
	const auto make = [&](Parameter& p, const StrategyOptions& options) {
		p = Parameter{"x", Tensor::zeros({n}, DType::f32, Device{}), Tensor::zeros({n}, DType::f32, Device{}), Tensor{}};
		return make_local_sgd_strategy(topology, Device{}, ParameterSet{{&p}}, inner(rule), options);
	};
	const auto step = [&](Strategy& strategy, Parameter& p) {
		for (int64_t i = 0; i < n; ++i)
			p.grad.data_as<float>()[i] = p.value.data_as<float>()[i] - static_cast<float>(centre(world().rank(), i));
		StepRequest request;
		request.lr = 0.1f;
		strategy.step(request);
	};
	const auto load = [](Strategy& to_strategy, const std::vector<NamedTensor>& saved) {
		std::vector<NamedTensor> loaded = to_strategy.variables();
		for (NamedTensor& to : loaded)
			for (const NamedTensor& from : saved)
				if (from.name == to.name)
					to.tensor.copy_from(from.tensor);
		to_strategy.variables_restored();
	};
	Parameter a_value, b_value, c_value;
	auto a = make(a_value, o);
	for (int s = 0; s < a_steps; ++s)
		step(*a, a_value);
	StrategyOptions longer = o;
	longer.local_sgd.local_start = 10;
	auto b = make(b_value, longer);
	load(*b, a->variables());
	a->settle_replicas();
	auto c = make(c_value, longer);
	load(*c, a->variables());
	step(*b, b_value);
	step(*c, c_value);
	CHECK(std::memcmp(b_value.value.data(), c_value.value.data(), n * sizeof(float)) == 0);
	CHECK_NOTHROW(check_replicas_of(world().comm(), {{"x", b_value.value}}));
}

} // namespace

TEST_CASE("a checkpoint resumed into the warm-up settles its workers once as it loads")
{
	SUBCASE("a mean in flight, one step since its sync") { resume_into_warm_up(4, "sgd"); }
	// Right at a sync: the mean lands and the workers stand on the anchor, with no further sync
	// (an outer step on a zero pseudo-gradient would still move Nesterov's anchor).
	SUBCASE("a mean in flight, taken at its sync") { resume_into_warm_up(3, "sgd"); }
	// Each worker's own AdamW moments: the warm-up's steps are the same only with rank 0's on all.
	SUBCASE("each worker's own inner state") { resume_into_warm_up(4, "adamw"); }
}

TEST_CASE("a non-finite gradient in the warm-up skips that step on every rank")
{
	const int last = world().size() - 1;
	StrategyOptions o = local_sgd(4);
	o.local_sgd.local_start = 3;
	edit_faults(o, [&](FaultInjection& f) { f.nonfinite_step = 1, f.nonfinite_rank = last; });
	const Run run = train(world().comm(), o, inner("adamw"), 3, [&](Tower& tower, int) {
		std::vector<NamedTensor> mine;
		for (Parameter* p : tower.model().parameters())
			mine.push_back({p->name, p->value});
		check_replicas_of(world().comm(), mine); // the workers stay together through the warm-up
	});
	CHECK(run.stats[1].skipped); // every rank's: the mean it took was not finite
	CHECK(!run.stats[0].skipped);
	CHECK(!run.stats[2].skipped);
	CHECK(run.details["skipped_inner_steps"].get<int64_t>() == 1);
}

TEST_CASE("a non-finite inner gradient skips that worker's step alone; a non-finite pseudo-gradient skips the sync "
	  "on every rank")
{
	const int last = world().size() - 1;
	StrategyOptions o = local_sgd(4, "nesterov", 0.7f);
	edit_faults(o, [&](FaultInjection& f) { f.nonfinite_step = 1, f.nonfinite_rank = last; });
	const Run run = train(world().comm(), o, inner("momentum"), 8, [&](Tower& tower, int step) {
		// Before the second sync one worker's parameters turn NaN: its pseudo-gradient, and so
		// the mean every rank computes, is not finite.
		if (step == 7 && world().rank() == last)
			tower.model().parameters()[0]->value.data_as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
	});
	CHECK(run.stats[1].skipped == (world().rank() == last));
	// The injected step, and step 8, whose gradient the NaN parameters made NaN as well.
	CHECK(run.details["skipped_inner_steps"].get<int64_t>() == (world().rank() == last ? 2 : 0));
	CHECK(!run.stats[3].skipped);
	CHECK(run.stats[7].skipped); // on every rank
	CHECK(run.details["skipped_syncs"].get<int64_t>() == 1);
	for (const auto& tensor : run.parameters)
		for (const float v : tensor)
			REQUIRE(std::isfinite(v));
}

TEST_CASE("overlapped and compressed, every piece of the outer all-reduce lands where it belongs")
{
	// bf16 and int8 pieces after the first start at an offset into their buffers: against the
	// float64 rule (uncompressed) they are off by the rounding only, a misplaced piece by far more.
	const Topology topology(world().comm(), std::nullopt);
	constexpr int64_t n = 2 * overlap_piece_values + 1000;
	for (const OuterCompression compress : {OuterCompression::bf16, OuterCompression::int8}) {
		CAPTURE(static_cast<int>(compress));
		StrategyOptions o = local_sgd(3);
		o.local_sgd.overlap = true;
		o.local_sgd.compress = compress;
		Parameter p{"x", Tensor::zeros({n}, DType::f32, Device{}), Tensor::zeros({n}, DType::f32, Device{}), Tensor{}};
		auto strategy = make_local_sgd_strategy(topology, Device{}, ParameterSet{{&p}}, inner("sgd"), o);
		for (int s = 0; s < 12; ++s) {
			for (int64_t i = 0; i < n; ++i)
				p.grad.data_as<float>()[i] =
					p.value.data_as<float>()[i] - static_cast<float>(centre(world().rank(), i));
			StepRequest request;
			request.lr = 0.1f;
			strategy->step(request);
		}
		strategy->settle_replicas();
		const std::vector<double> expected = simulate_local_sgd(world().size(), n, o.local_sgd, 0.1, 12);
		double worst = 0;
		for (int64_t i = 0; i < n; ++i)
			worst = std::max(worst, std::abs(p.value.data_as<float>()[i] - expected[i]) /
							std::max(std::abs(expected[i]), 1.0));
		CHECK(worst <= 2e-2);
		CHECK(worst > 0); // the rounding is there: the pieces were compressed
	}
}

TEST_CASE("under overlap a non-finite pseudo-gradient skips its outer step a sync later, on every rank")
{
	const int last = world().size() - 1;
	StrategyOptions o = local_sgd(4, "nesterov", 0.7f);
	o.local_sgd.overlap = true;
	const Run run = train(world().comm(), o, inner("momentum"), 16, [&](Tower& tower, int step) {
		// The sync at step 8 sends this worker's NaN move; its mean arrives for the sync at 12.
		if (step == 7 && world().rank() == last)
			tower.model().parameters()[0]->value.data_as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
	});
	CHECK(run.stats[7].skipped == (world().rank() == last)); // its gradient, from the NaN parameter
	CHECK(run.stats[11].skipped); // on every rank
	CHECK(!run.stats[15].skipped);
	CHECK(run.details["skipped_syncs"].get<int64_t>() == 1);
	for (const auto& tensor : run.parameters)
		for (const float v : tensor)
			REQUIRE(std::isfinite(v));
}

TEST_CASE("local-sgd's option errors are errors on every rank")
{
	const auto refused = [](StrategyOptions o, const char* text) {
		CAPTURE(text);
		CHECK_THROWS_WITH_AS(train(world().comm(), o, inner("sgd"), 1), doctest::Contains(text), AgreedError);
	};
	StrategyOptions o = local_sgd(0);
	refused(o, "`sync_every` 0");
	o = local_sgd(2, "adam");
	refused(o, "`outer_optimizer` adam");
	o = local_sgd(2);
	o.gradients.compress = DType::bf16;
	refused(o, "`outer_compress`");
	o = local_sgd(2);
	o.ema_decay = 0.9;
	refused(o, "`ema_decay`");
	o = local_sgd(2);
	o.gradients.loss_scale.mode = LossScaleMode::dynamic;
	refused(o, "`loss_scale`");
}
