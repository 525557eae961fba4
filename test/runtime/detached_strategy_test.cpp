// The async and sync-replicas strategies: sync-replicas against parameter-server, exact counts of
// applied and dropped gradients under an injected straggler, several gradients per update, async
// applying every gradient once scaled by 1/workers, and their option errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "data/batch_assembler.h"
#include "data/sampler.h"
#include "models/model_factory.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "runtime/strategies/fault_injection.h"
#include "runtime/strategies/async/async_rule.h"
#include "runtime/strategies/detached/detached_strategy.h"
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

StrategyOptions options(const char* name, int ps_ranks = 0, int n = 0)
{
	StrategyOptions o;
	o.name = name;
	o.ps_ranks = ps_ranks;
	o.replicas_to_aggregate = n;
	return o;
}

// One worker step driven at the gradient level, the way DistributedOptimizer drives it: fetch,
// forward, backward, push (with the learning rate `carried` gives the token's step, where the
// plan has no schedule). False once the chief has handed out the last token.
bool work(DetachedStrategy& d, Model& model, const ImageBatch& b, StepStats* stats,
	  const std::function<float(int64_t)>& carried)
{
	if (!d.begin_step())
		return false;
	const ForwardResult result = model.forward(b.images, b.labels);
	model.backward(d.begin_final_backward(), BackwardOptions{});
	StepRequest request;
	if (carried)
		request.lr = carried(d.last_token_step());
	request.samples = b.images.shape()[0];
	request.loss = result.loss;
	*stats = d.step(request);
	stats->forward = result;
	return true;
}

struct Detached {
	std::vector<std::vector<float>> initial, parameters; // workers only
	std::vector<std::vector<float>> pushed;              // this worker's sum of lr * gradient pushed
	std::vector<int64_t> token_steps;                    // the global step of each of its tokens
	int64_t skipped = 0;                                 // its gradients the owners dropped as non-finite
	nlohmann::json totals;
	float first_loss = 0, last_loss = 0;
};

// Runs a detached strategy for a plan of `planned` lock-step updates at a constant rate, or at
// `schedule` on a DetachedStrategy built with `rule` when one is given. With `lr_travels` the plan
// has no schedule: each worker's step carries the rate `schedule` gives its token's step.
Detached run_detached(const StrategyOptions& o, const OptimizerConfig& optimizer, int64_t planned,
		      std::unique_ptr<UpdateRule> rule = nullptr,
		      std::function<float(int64_t)> schedule = [](int64_t) { return lr; }, bool lr_travels = false,
		      int64_t resumed_updates = 0)
{
	const Device cpu;
	const Topology topology(world().comm(), std::nullopt);
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	const ParameterSet parameters{model->parameters()};
	auto strategy = rule ? std::make_unique<DetachedStrategy>(topology, cpu, parameters, optimizer, o, std::move(rule),
								   o.name)
			     : make_strategy(topology, cpu, parameters, optimizer, o);
	auto& d = dynamic_cast<DetachedStrategy&>(*strategy);
	Detached out;
	if (d.is_worker())
		out.initial = tower::test::parameter_values(*model);
	// As a restore leaves them: the owners' update counters at `resumed_updates`.
	if (resumed_updates > 0)
		for (NamedTensor& v : d.variables())
			if (v.name == step_counter_name)
				*v.tensor.data_as<int64_t>() = resumed_updates;
	DetachedPlan plan;
	plan.planned_steps = planned;
	if (!lr_travels)
		plan.lr = schedule;
	d.start(plan);
	if (d.is_worker()) {
		DistributedSampler sampler(data().count, batch, d.worker_index(), d.workers(), 99);
		BatchAssembler assembler(data(), batch, cpu);
		std::vector<Parameter*> params = model->parameters();
		for (const Parameter* p : params)
			out.pushed.emplace_back(static_cast<size_t>(p->grad.numel()), 0.0f);
		for (int64_t k = 0;; ++k) {
			const ImageBatch& b = assembler.assemble(sampler.shard(k / sampler.steps_per_epoch(), k % sampler.steps_per_epoch()));
			StepStats s;
			if (!work(d, *model, b, &s, lr_travels ? schedule : std::function<float(int64_t)>{}))
				break;
			(k == 0 ? out.first_loss : out.last_loss) = s.forward.loss;
			out.skipped += s.skipped ? 1 : 0;
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
	auto strategy = std::make_unique<Tower>(topology, cpu, *model, optimizer, options("parameter-server", ps_ranks));
	DistributedSampler sampler(data().count, batch, std::max(strategy->worker_index(), 0), strategy->workers(), 99);
	BatchAssembler assembler(data(), batch, cpu);
	for (int s = 0; s < steps; ++s) {
		if (strategy->is_worker()) {
			const ImageBatch& b = assembler.assemble(sampler.shard(s / sampler.steps_per_epoch(), s % sampler.steps_per_epoch()));
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

TEST_CASE("without a schedule in the plan, each update takes the learning rate its gradients carried")
{
	// A schedule of the workers' own (a PyTorch program's LR scheduler) gives what the same
	// schedule given to the owners gives (bit for bit at 2 workers; at 3 the owners sum the
	// gradients in the order they arrive, which moves the last bits).
	const auto schedule = [](int64_t step) { return lr / static_cast<float>(1 + step / 5); };
	OptimizerConfig optimizer;
	optimizer.name = "momentum";
	const Detached planned = run_detached(options("sync-replicas"), optimizer, 20, nullptr, schedule);
	const Detached carried = run_detached(options("sync-replicas"), optimizer, 20, nullptr, schedule, true);
	if (world().size() <= 2)
		CHECK(carried.parameters == planned.parameters);
	CHECK(tower::test::max_relative_difference(carried.parameters, planned.parameters) <= 1e-6);
	const Detached constant = run_detached(options("sync-replicas"), optimizer, 20);
	CHECK(tower::test::max_relative_difference(carried.parameters, constant.parameters) > 1e-3);
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
		edit_faults(o, [](FaultInjection& f) { f.delay_rank = world().size() - 1, f.delay_ms = 10; });
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

TEST_CASE("a resumed async run hands out only the tokens its updates have not taken")
{
	// 20 planned lock-step steps are 20 x workers updates; resumed after 15 of them, the chief
	// grants the rest and no gradient is computed in vain.
	const int workers = world().size();
	const Detached run = run_detached(options("async"), OptimizerConfig{}, 20, nullptr,
					  [](int64_t) { return lr; }, false, 15);
	const int64_t pushes = sum_over_world(static_cast<int64_t>(run.token_steps.size()));
	CHECK(pushes == 20 * workers - 15);
	for (const auto& owner : run.totals["owners"]) {
		CAPTURE(owner.dump());
		CHECK(at(owner, "updates") == 20 * workers);
		CHECK(at(owner, "dropped_stale") == 0);
	}
}

TEST_CASE("a non-finite gradient is dropped by every owner, counted, and its token granted again")
{
	// The bad batch's worker is the last rank (a worker whether or not rank 0 serves); its third
	// gradient carries a NaN. Every owner drops its slice of it, and the run still applies every
	// planned update: sync-replicas would otherwise wait forever for the update's last gradient.
	for (const char* name : {"sync-replicas", "async"})
		for (int servers = 0; servers < std::min(world().size(), 2); ++servers) {
			CAPTURE(name);
			CAPTURE(servers);
			StrategyOptions o = options(name, servers);
			edit_faults(o, [](FaultInjection& f) { f.nonfinite_step = 2, f.nonfinite_rank = world().size() - 1; });
			const Detached run = run_detached(o, OptimizerConfig{}, 12);
			const int workers = world().size() - servers;
			const int64_t pushes = sum_over_world(static_cast<int64_t>(run.token_steps.size()));
			const int64_t updates = std::string(name) == "async" ? 12 * workers : 12;
			const int64_t per_update = std::string(name) == "async" ? 1 : workers;
			CHECK(pushes == updates * per_update + 1);
			for (const auto& owner : run.totals["owners"]) {
				CAPTURE(owner.dump());
				CHECK(at(owner, "updates") == updates);
				CHECK(at(owner, "gradients_received") == pushes);
				CHECK(at(owner, "gradients_applied") == updates * per_update);
				CHECK(at(owner, "dropped_nonfinite") == 1);
				CHECK(at(owner, "dropped_stale") == 0);
			}
			CHECK(run.skipped == (world().rank() == world().size() - 1 ? 1 : 0));
			for (const auto& tensor : run.parameters)
				for (const float v : tensor)
					REQUIRE(std::isfinite(v));
		}
}

TEST_CASE("async applies every gradient exactly once, scaled by 1/workers")
{
	OptimizerConfig sgd;
	sgd.name = "sgd";
	for (const bool scale : {true, false}) {
		CAPTURE(scale);
		StrategyOptions o = options("async");
		o.async_scale = scale;
		o.max_staleness = -1; // the seed's semantics: no worker ever waits
		if (world().size() > 1)
			edit_faults(o, [](FaultInjection& f) { f.delay_rank = 1, f.delay_ms = 5; });
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

namespace {

// Async's rule with its workers forced into lock-step: one token at a time, in worker order, each
// granted only once the previous gradient is applied. Staleness is then zero and async must be
// sequential SGD on one rank walking the same batches.
class LockStepAsyncRule final : public UpdateRule {
public:
	explicit LockStepAsyncRule(int workers) : workers_(workers), async_(workers, true) {}
	int64_t target_updates(int64_t planned_steps) const override { return async_.target_updates(planned_steps); }
	int64_t planned_step(int64_t update) const override { return async_.planned_step(update); }
	TokenAnswer token(const TokenBook& book) const override
	{
		if (async_.token(book) == TokenAnswer::stop)
			return TokenAnswer::stop;
		const bool turn = book.step == book.given_total && book.given_total % workers_ == book.worker;
		return turn ? TokenAnswer::grant : TokenAnswer::wait;
	}
	bool fresh(int64_t tag, int64_t step) const override { return async_.fresh(tag, step); }
	int gradients_per_update() const override { return async_.gradients_per_update(); }
	float factor() const override { return async_.factor(); }

private:
	int workers_;
	AsyncRule async_;
};

// Sequential SGD on this rank alone: update t takes the one-rank batch t (the same samples as
// worker t % W's step t / W) at the rate of planned step t / W, scaled by 1/W.
std::vector<std::vector<float>> sequential_run(const OptimizerConfig& optimizer, int64_t updates, int workers,
					       const std::function<float(int64_t)>& schedule)
{
	const Device cpu;
	const Topology alone(MPI_COMM_SELF, std::nullopt);
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	auto strategy = std::make_unique<Tower>(alone, cpu, *model, optimizer, options("replicated"));
	DistributedSampler sampler(data().count, batch, 0, 1, 99);
	BatchAssembler assembler(data(), batch, cpu);
	for (int64_t t = 0; t < updates; ++t) {
		const ImageBatch& b = assembler.assemble(sampler.shard(t / sampler.steps_per_epoch(), t % sampler.steps_per_epoch()));
		strategy->step(b.images, b.labels, schedule(t / workers) / static_cast<float>(workers));
	}
	return tower::test::parameter_values(*model);
}

} // namespace

TEST_CASE("async with its workers in lock-step is sequential SGD over the same batches")
{
	// Staleness aside, async must be plain SGD: the data each worker walks, the 1/workers scale, the
	// rate of each update and the optimizer state kept per push all show here. A decaying rate
	// makes the step-to-rate mapping count; 10 planned steps stay inside the first epoch. (Not Adam:
	// it divides out the 1/workers scale, so no rate on one rank reproduces it.)
	const int workers = world().size();
	const auto schedule = [](int64_t planned_step) { return lr / static_cast<float>(1 + planned_step); };
	for (const char* name : {"sgd", "momentum"}) {
		CAPTURE(name);
		OptimizerConfig optimizer;
		optimizer.name = name;
		const Detached run = run_detached(options("async"), optimizer, 10,
						  std::make_unique<LockStepAsyncRule>(workers), schedule);
		check_counts(run.totals, 10 * workers, 10 * workers, 1);
		CHECK(run.totals["staleness_max"].get<int64_t>() == 0);
		const auto sequential = sequential_run(optimizer, 10 * workers, workers, schedule);
		CHECK(tower::test::max_relative_difference(run.parameters, sequential) <= 1e-5);
	}
}

namespace {

uint64_t hash_floats(const float* values, int64_t count, uint64_t h)
{
	const auto* bytes = reinterpret_cast<const unsigned char*>(values);
	for (size_t i = 0; i < static_cast<size_t>(count) * sizeof(float); ++i)
		h = (h ^ bytes[i]) * 1099511628211ull;
	return h;
}

// Async's rule, recording on the owner thread a hash of the owner's values before every update:
// history[k] is the hash of the values after k updates.
class RecordingAsyncRule final : public UpdateRule {
public:
	explicit RecordingAsyncRule(int workers) : async_(workers, true) {}
	int64_t target_updates(int64_t planned_steps) const override { return async_.target_updates(planned_steps); }
	int64_t planned_step(int64_t update) const override { return async_.planned_step(update); }
	TokenAnswer token(const TokenBook& book) const override { return async_.token(book); }
	bool fresh(int64_t tag, int64_t step) const override { return async_.fresh(tag, step); }
	int gradients_per_update() const override { return async_.gradients_per_update(); }
	float factor() const override
	{
		history.push_back(hash());
		return async_.factor();
	}
	uint64_t hash() const
	{
		uint64_t h = 14695981039346656037ull;
		for (const Tensor& t : master)
			h = hash_floats(t.data_as<float>(), t.numel(), h);
		return h;
	}
	std::vector<Tensor> master; // this owner's slices, in placement order
	mutable std::vector<uint64_t> history;

private:
	AsyncRule async_;
};

} // namespace

TEST_CASE("every async gradient was computed on its owners' values of the update it is tagged with")
{
	// A worker that is also an owner must not read its own owner's master copy while that owner
	// applies other workers' gradients: the values it computes on would be newer than their tag,
	// or a mix of two updates.
	const Device cpu;
	const Topology topology(world().comm(), std::nullopt);
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	auto owned_rule = std::make_unique<RecordingAsyncRule>(world().size());
	RecordingAsyncRule& rule = *owned_rule;
	DetachedStrategy d(topology, cpu, ParameterSet{model->parameters()}, OptimizerConfig{}, options("async"),
			   std::move(owned_rule), "async");
	const std::vector<Parameter*> params = model->parameters();
	const std::vector<VariableSlice>& slices = d.placement().slices;
	for (const VariableSlice& s : slices)
		if (s.owner == world().rank())
			rule.master.push_back(d.variables()[rule.master.size()].tensor);
	const int64_t planned = 60;
	DetachedPlan plan;
	plan.planned_steps = planned;
	plan.lr = [](int64_t) { return lr; };
	d.start(plan);
	DistributedSampler sampler(data().count, batch, d.worker_index(), d.workers(), 99);
	BatchAssembler assembler(data(), batch, cpu);
	std::vector<std::vector<int64_t>> tags;
	std::vector<std::vector<uint64_t>> used; // per step and owner: the hash of the values computed on
	for (int64_t k = 0;; ++k) {
		const ImageBatch& b = assembler.assemble(sampler.shard(k / sampler.steps_per_epoch(), k % sampler.steps_per_epoch()));
		StepStats stats;
		if (!work(d, *model, b, &stats, {}))
			break;
		tags.push_back(d.last_tags());
		std::vector<uint64_t> h(static_cast<size_t>(world().size()), 14695981039346656037ull);
		for (const VariableSlice& s : slices)
			h[static_cast<size_t>(s.owner)] = hash_floats(params[s.variable]->value.data_as<float>() + s.offset,
								      s.count, h[static_cast<size_t>(s.owner)]);
		used.push_back(h);
	}
	d.finish();
	rule.history.push_back(rule.hash());
	const int64_t updates = planned * world().size();
	REQUIRE(rule.history.size() == static_cast<size_t>(updates + 1));
	int64_t wrong = 0;
	for (int owner = 0; owner < world().size(); ++owner) {
		std::vector<uint64_t> history = rule.history;
		TOWER_MPI(MPI_Bcast(history.data(), static_cast<int>(history.size()), MPI_UINT64_T, owner, world().comm()));
		for (size_t k = 0; k < tags.size(); ++k) {
			const auto tag = static_cast<size_t>(tags[k][static_cast<size_t>(owner)]);
			wrong += tag >= history.size() || history[tag] != used[k][static_cast<size_t>(owner)];
		}
	}
	CHECK(tags.size() > 0);
	CHECK(wrong == 0);
}

TEST_CASE("async's staleness-aware scale: 1/max(workers, staleness + 1), or 1/(staleness + 1) unscaled")
{
	const AsyncRule seed(3, true), scaled(3, true, AsyncStaleness{true, -1}), plain(3, false, AsyncStaleness{true, -1});
	for (int64_t s = 0; s < 8; ++s) {
		CAPTURE(s);
		CHECK(seed.factor() * seed.staleness_factor(s) == doctest::Approx(1.0 / 3));
		CHECK(scaled.factor() * scaled.staleness_factor(s) == doctest::Approx(1.0 / std::max<double>(3, s + 1)));
		CHECK(plain.factor() * plain.staleness_factor(s) == doctest::Approx(1.0 / static_cast<double>(s + 1)));
	}
}

TEST_CASE("async's staleness bound: a token waits while a gradient in flight could arrive more than S late")
{
	const AsyncRule bounded(3, true, AsyncStaleness{false, 2}), unbounded(3, true);
	TokenBook book;
	book.target = 100;
	book.step = 10;
	CHECK(bounded.token(book) == TokenAnswer::grant); // nothing in flight
	book.in_flight = 2;
	book.oldest_in_flight = 10; // the oldest could see the other one and the new one: 2
	CHECK(bounded.token(book) == TokenAnswer::grant);
	book.oldest_in_flight = 9; // 1 update already since its fetch: 3 > 2
	CHECK(bounded.token(book) == TokenAnswer::wait);
	CHECK(unbounded.token(book) == TokenAnswer::grant);
	book.given_total = 100;
	CHECK(bounded.token(book) == TokenAnswer::stop);
}

TEST_CASE("async with `max_staleness` S applies no gradient more than S updates late, whatever the delays")
{
	// A straggler (rank 1 sleeps) would see every other worker's gradients applied while it computes.
	OptimizerConfig sgd;
	sgd.name = "sgd";
	const int workers = world().size();
	for (const int64_t bound : {int64_t{0}, int64_t{1}}) {
		CAPTURE(bound);
		StrategyOptions o = options("async");
		o.max_staleness = bound;
		if (workers > 1)
			edit_faults(o, [](FaultInjection& f) { f.delay_rank = 1, f.delay_ms = 5; });
		const Detached run = run_detached(o, sgd, 10);
		check_counts(run.totals, 10 * workers, 10 * workers, 1);
		for (const auto& owner : run.totals["owners"]) {
			CAPTURE(owner.dump());
			CHECK(owner["staleness_max"].get<int64_t>() <= bound);
		}
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
	compressed.gradients.compress = DType::f16;
	CHECK_THROWS_WITH_AS(run_detached(compressed, sgd, 1), doctest::Contains("`compress`"), AgreedError);
	if (world().size() >= 2) {
		StrategyOptions server_nan = options("sync-replicas", 1);
		edit_faults(server_nan, [](FaultInjection& f) { f.nonfinite_step = 0, f.nonfinite_rank = 0; });
		CHECK_THROWS_WITH_AS(run_detached(server_nan, sgd, 1), doctest::Contains("is a server"), AgreedError);
	}
}
