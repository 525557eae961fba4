// The async and sync-replicas strategies: sync-replicas against parameter-server, exact counts of
// applied and dropped gradients under an injected straggler, several gradients per update, async
// applying every gradient once scaled by 1/workers, and their option errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "models/data/batch_assembler.h"
#include "models/data/sampler.h"
#include "models/model_factory.h"
#include "runtime/base/error.h"
#include "runtime/base/mpi_check.h"
#include "runtime/detached_strategy.h"
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

StrategyOptions options(const char* name, int ps_ranks = 0, int n = 0)
{
	StrategyOptions o;
	o.name = name;
	o.ps_ranks = ps_ranks;
	o.replicas_to_aggregate = n;
	return o;
}

struct Detached {
	std::vector<std::vector<float>> initial, parameters; // workers only
	std::vector<std::vector<float>> pushed;              // this worker's sum of lr * gradient pushed
	std::vector<int64_t> token_steps;                    // the global step of each of its tokens
	nlohmann::json totals;
	float first_loss = 0, last_loss = 0;
};

// Runs a detached strategy for a plan of `planned` lock-step updates at a constant rate.
Detached run_detached(const StrategyOptions& o, const OptimizerConfig& optimizer, int64_t planned)
{
	const Device cpu;
	const Topology topology(world().comm(), std::nullopt);
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	auto strategy = make_strategy(topology, cpu, *model, optimizer, o);
	auto& d = dynamic_cast<DetachedStrategy&>(*strategy);
	Detached out;
	if (d.is_worker())
		out.initial = tower::test::parameter_values(*model);
	DetachedPlan plan;
	plan.planned_steps = planned;
	plan.lr = [](int64_t) { return lr; };
	d.start(plan);
	if (d.is_worker()) {
		DistributedSampler sampler(data().count, batch, d.worker_index(), d.workers(), 99);
		BatchAssembler assembler(data(), batch, cpu);
		std::vector<Parameter*> params = model->parameters();
		for (const Parameter* p : params)
			out.pushed.emplace_back(static_cast<size_t>(p->grad.numel()), 0.0f);
		for (int64_t k = 0;; ++k) {
			const Batch& b = assembler.assemble(sampler.shard(k / sampler.steps_per_epoch(), k % sampler.steps_per_epoch()));
			StepStats s;
			if (!d.work(b.images, b.labels, &s))
				break;
			(k == 0 ? out.first_loss : out.last_loss) = s.forward.loss;
			out.token_steps.push_back(d.last_token_step());
			for (size_t i = 0; i < params.size(); ++i) {
				const float* g = params[i]->grad.data_as<float>();
				for (size_t j = 0; j < out.pushed[i].size(); ++j)
					out.pushed[i][j] += lr * g[j];
			}
		}
	}
	out.totals = d.finish();
	d.check_replicas();
	if (d.is_worker())
		out.parameters = tower::test::parameter_values(*model);
	return out;
}

// The parameter-server run of the same plan: every worker takes its shard of the same batches.
std::vector<std::vector<float>> parameter_server_run(int ps_ranks, const OptimizerConfig& optimizer, int steps)
{
	const Device cpu;
	const Topology topology(world().comm(), std::nullopt);
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	auto strategy = make_strategy(topology, cpu, *model, optimizer, options("parameter-server", ps_ranks));
	DistributedSampler sampler(data().count, batch, std::max(strategy->worker_index(), 0), strategy->workers(), 99);
	BatchAssembler assembler(data(), batch, cpu);
	for (int s = 0; s < steps; ++s) {
		if (strategy->is_worker()) {
			const Batch& b = assembler.assemble(sampler.shard(s / sampler.steps_per_epoch(), s % sampler.steps_per_epoch()));
			strategy->step(b.images, b.labels, lr);
		} else {
			strategy->step(Tensor{}, Tensor{}, lr);
		}
	}
	return strategy->is_worker() ? tower::test::parameter_values(*model) : std::vector<std::vector<float>>{};
}

int64_t sum_over_world(int64_t v)
{
	TOWER_MPI(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_SUM, world().comm()));
	return v;
}

int64_t at(const nlohmann::json& owner, const char* key)
{
	return owner[key].get<int64_t>();
}

// Every owner applied `updates` updates of exactly `n` gradients each and counted the rest as dropped.
void check_counts(const nlohmann::json& totals, int64_t pushes, int64_t updates, int64_t n)
{
	for (const auto& owner : totals["owners"]) {
		CAPTURE(owner.dump());
		CHECK(at(owner, "updates") == updates);
		CHECK(at(owner, "gradients_received") == pushes);
		CHECK(at(owner, "gradients_applied") == n * updates);
		CHECK(at(owner, "dropped_stale") == pushes - n * updates);
	}
}

} // namespace

TEST_CASE("sync-replicas with N == workers and no straggler matches parameter-server")
{
	for (int servers = 0; servers < std::min(world().size(), 2); ++servers)
		for (const char* name : {"momentum", "adam"}) {
			CAPTURE(servers);
			CAPTURE(name);
			OptimizerConfig optimizer;
			optimizer.name = name;
			const Detached sync = run_detached(options("sync-replicas", servers), optimizer, 30);
			const auto ps = parameter_server_run(servers, optimizer, 30);
			const int64_t pushes = sum_over_world(static_cast<int64_t>(sync.token_steps.size()));
			check_counts(sync.totals, pushes, 30, world().size() - servers);
			CHECK(pushes == 30 * (world().size() - servers));
			if (world().rank() < servers)
				continue;
			CHECK(tower::test::max_relative_difference(sync.parameters, ps) <= 1e-5);
			CHECK(sync.last_loss < sync.first_loss);
			// One token per update: the worker computed at every global step in turn.
			for (size_t i = 0; i < sync.token_steps.size(); ++i)
				CHECK(sync.token_steps[i] == static_cast<int64_t>(i));
		}
}

TEST_CASE("sync-replicas with a straggler averages exactly N fresh gradients and drops the rest")
{
	if (world().size() < 2)
		return;
	for (int servers = 0; servers < std::min(world().size() - 1, 2); ++servers) {
		CAPTURE(servers);
		const int workers = world().size() - servers;
		if (workers < 2)
			continue;
		StrategyOptions o = options("sync-replicas", servers, workers - 1);
		o.inject_delay_rank = world().size() - 1;
		o.inject_delay_ms = 10;
		const Detached run = run_detached(o, OptimizerConfig{}, 1000);
		const int64_t pushes = sum_over_world(static_cast<int64_t>(run.token_steps.size()));
		check_counts(run.totals, pushes, 1000, workers - 1);
		CHECK(run.totals["staleness_max"].get<int64_t>() == 0);
		// The straggler's gradients came too late, and it went on from newer variables: its
		// tokens skip global steps. Every worker's tokens only ever move forward.
		CHECK(at(run.totals, "dropped_stale") > 0);
		for (size_t i = 1; i < run.token_steps.size(); ++i)
			CHECK(run.token_steps[i] > run.token_steps[i - 1]);
		if (world().rank() == world().size() - 1) {
			// 10 ms a step against the others' fraction of one: it asks again long before the 1000th update.
			REQUIRE(run.token_steps.size() >= 2);
			CHECK(run.token_steps.back() - run.token_steps.front() > static_cast<int64_t>(run.token_steps.size()) - 1);
		}
	}
}

TEST_CASE("sync-replicas with N > workers puts N gradients into every update")
{
	const int workers = world().size();
	const int n = workers + 2;
	const Detached run = run_detached(options("sync-replicas", 0, n), OptimizerConfig{}, 6);
	const int64_t pushes = sum_over_world(static_cast<int64_t>(run.token_steps.size()));
	check_counts(run.totals, pushes, 6, n);
	CHECK(pushes == 6 * n);
	// At most ceil(N / workers) gradients per worker per update, each on that update's variables.
	const int64_t per_worker = (n + workers - 1) / workers;
	for (int64_t step = 0; step < 6; ++step)
		CHECK(std::count(run.token_steps.begin(), run.token_steps.end(), step) <= per_worker);
}

TEST_CASE("async applies every gradient exactly once, scaled by 1/workers")
{
	OptimizerConfig sgd;
	sgd.name = "sgd";
	for (const bool scale : {true, false}) {
		CAPTURE(scale);
		StrategyOptions o = options("async");
		o.async_scale = scale;
		if (world().size() > 1)
			o.inject_delay_rank = 1, o.inject_delay_ms = 5;
		const Detached run = run_detached(o, sgd, 10);
		const int workers = world().size();
		const int64_t pushes = sum_over_world(static_cast<int64_t>(run.token_steps.size()));
		CHECK(pushes == 10 * workers);
		check_counts(run.totals, pushes, 10 * workers, 1);
		// Plain SGD is linear in the gradients: the final variables are the initial ones minus the
		// factor times every pushed lr * gradient, whatever order the owners applied them in.
		std::vector<std::vector<float>> all = run.pushed;
		for (auto& t : all)
			TOWER_MPI(MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.size()), MPI_FLOAT, MPI_SUM,
						world().comm()));
		const float factor = scale ? 1.0f / static_cast<float>(workers) : 1.0f;
		std::vector<std::vector<float>> moved = run.parameters, expected = all;
		for (size_t i = 0; i < moved.size(); ++i)
			for (size_t j = 0; j < moved[i].size(); ++j) {
				moved[i][j] -= run.initial[i][j];
				expected[i][j] *= -factor;
			}
		CHECK(tower::test::max_relative_difference(moved, expected) <= 1e-4);
	}
}

TEST_CASE("the detached strategies' option errors are errors on every rank")
{
	OptimizerConfig sgd;
	CHECK_THROWS_WITH_AS(run_detached(options("sync-replicas", 0, -1), sgd, 1),
			     doctest::Contains("at least 1 gradient"), AgreedError);
	CHECK_THROWS_WITH_AS(run_detached(options("async", 0, 2), sgd, 1), doctest::Contains("sync-replicas"),
			     AgreedError);
	StrategyOptions compressed = options("async");
	compressed.replicated.compress = DType::f16;
	CHECK_THROWS_WITH_AS(run_detached(compressed, sgd, 1), doctest::Contains("--compress"), AgreedError);
}
