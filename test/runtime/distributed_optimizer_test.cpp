// The gradient-level API on a program of its own (least squares with hand-written gradients): every
// lock-step strategy against a float64 loop and a one-rank run, two optimizers in one program,
// shared and reset optimizer state, and the errors of a program that reports its gradients wrong.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/options/names.h"
#include "base/error.h"
#include "runtime/distributed_optimizer.h"
#include "runtime/strategies/detached/detached_strategy.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

constexpr int inputs = 4, outputs = 3;
constexpr int64_t global_batch = 24; // divides among 1, 2, 3 and 4 workers into even shares
constexpr float lr = 0.1f;

double input(int64_t sample, int j) { return std::sin(0.37 * static_cast<double>(sample) + 1.3 * j); }
double target(int64_t sample, int k) { return std::cos(0.11 * static_cast<double>(sample) * (k + 1) + 0.5); }

// y = W x + b, loss 1/(2n) sum ||W x + b - t||^2 over n samples. `offset` picks other data.
class LeastSquares {
public:
	explicit LeastSquares(double seed, int64_t offset = 0) : offset_(offset)
	{
		std::vector<float> w(inputs * outputs), b(outputs);
		for (size_t i = 0; i < w.size(); ++i)
			w[i] = static_cast<float>(0.2 * std::sin(seed + static_cast<double>(i)));
		for (size_t i = 0; i < b.size(); ++i)
			b[i] = static_cast<float>(0.1 * std::cos(seed + static_cast<double>(i)));
		w_ = {"w", Tensor::from_host(w, {outputs, inputs}, cpu_), Tensor::zeros({outputs, inputs}, DType::f32, cpu_), {}};
		b_ = {"b", Tensor::from_host(b, {outputs}, cpu_), Tensor::zeros({outputs}, DType::f32, cpu_), {}};
	}
	std::vector<Parameter*> parameters() { return {&w_, &b_}; }

	// Forward and backward over samples [first, first + n), the way `pass` says; reports b, then
	// w, ready (backward order), unless `forget_b`.
	void pass(int64_t first, int64_t n, const BackwardPass& pass, bool forget_b = false)
	{
		float* gw = w_.grad.data_as<float>();
		float* gb = b_.grad.data_as<float>();
		const float* w = w_.value.data_as<float>();
		const float* b = b_.value.data_as<float>();
		std::vector<double> dw(inputs * outputs, 0.0), db(outputs, 0.0);
		for (int64_t s = first + offset_; s < first + offset_ + n; ++s)
			for (int k = 0; k < outputs; ++k) {
				double r = b[k] - target(s, k);
				for (int j = 0; j < inputs; ++j)
					r += w[k * inputs + j] * input(s, j);
				db[static_cast<size_t>(k)] += r / static_cast<double>(n);
				for (int j = 0; j < inputs; ++j)
					dw[static_cast<size_t>(k * inputs + j)] += r * input(s, j) / static_cast<double>(n);
			}
		const auto store = [&](float* g, const std::vector<double>& d) {
			for (size_t i = 0; i < d.size(); ++i) {
				const auto v = static_cast<float>(d[i] * pass.options.loss_scale);
				g[i] = pass.options.accumulate ? g[i] + v : v;
			}
		};
		store(gb, db);
		if (pass.on_ready && !forget_b)
			pass.on_ready(b_);
		store(gw, dw);
		if (pass.on_ready)
			pass.on_ready(w_);
	}

	std::vector<float> values() const
	{
		std::vector<float> out = w_.value.to_host_f32();
		for (float v : b_.value.to_host_f32())
			out.push_back(v);
		return out;
	}

private:
	Device cpu_;
	int64_t offset_;
	Parameter w_, b_;
};

// One step of `opt` on this worker's share of global batch `step`, in `passes` backward passes.
StepStats train_step(DistributedOptimizer& opt, LeastSquares& program, int64_t step, int passes = 1)
{
	if (!opt.begin_step())
		return {};
	if (!opt.is_worker())
		return opt.step(lr);
	const int64_t share = global_batch / opt.workers();
	const int64_t first = step * global_batch + opt.worker_index() * share;
	const int64_t each = share / passes;
	for (int p = 0; p < passes; ++p)
		program.pass(first + p * each, each, opt.backward_pass(p + 1 == passes));
	return opt.step(lr);
}

// Momentum SGD (tower's rule: v = m v + g; p -= lr v) in float64 over whole global batches; a
// step listed in `reset_before` starts from zero momentum.
std::vector<double> float64_momentum(double seed, int steps, int64_t offset = 0, int reset_before = -1)
{
	LeastSquares start(seed);
	std::vector<double> p;
	for (float v : start.values())
		p.push_back(v);
	std::vector<double> velocity(p.size(), 0.0);
	for (int step = 0; step < steps; ++step) {
		if (step == reset_before)
			std::fill(velocity.begin(), velocity.end(), 0.0);
		std::vector<double> g(p.size(), 0.0);
		for (int64_t s = step * global_batch + offset; s < (step + 1) * global_batch + offset; ++s)
			for (int k = 0; k < outputs; ++k) {
				double r = p[static_cast<size_t>(inputs * outputs + k)] - target(s, k);
				for (int j = 0; j < inputs; ++j)
					r += p[static_cast<size_t>(k * inputs + j)] * input(s, j);
				g[static_cast<size_t>(inputs * outputs + k)] += r / global_batch;
				for (int j = 0; j < inputs; ++j)
					g[static_cast<size_t>(k * inputs + j)] += r * input(s, j) / global_batch;
			}
		for (size_t i = 0; i < p.size(); ++i) {
			velocity[i] = 0.9 * velocity[i] + g[i];
			p[i] -= lr * velocity[i];
		}
	}
	return p;
}

double max_difference(const std::vector<float>& a, const std::vector<double>& b)
{
	REQUIRE(a.size() == b.size());
	double worst = 0;
	for (size_t i = 0; i < a.size(); ++i)
		worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
	return worst;
}

StrategyOptions strategy(const std::string& name, int ps_ranks = 0)
{
	StrategyOptions o;
	o.name = name;
	o.ps_ranks = ps_ranks;
	o.replicated.fusion_mb = 0; // a bucket per parameter: several all-reduces overlap backward
	return o;
}

// Trains a LeastSquares program for `steps` global batches on `topology`; the values, on a worker.
std::vector<float> train(const Topology& topology, const StrategyOptions& options, int steps, int passes)
{
	LeastSquares program(1.0);
	DistributedOptimizer opt(topology, Device{}, program.parameters(), OptimizerConfig{}, options);
	for (int s = 0; s < steps; ++s)
		train_step(opt, program, s, passes);
	opt.check_replicas();
	return opt.is_worker() ? program.values() : std::vector<float>{};
}

DistributedOptimizerSettings named(std::string name)
{
	DistributedOptimizerSettings s;
	s.name = std::move(name);
	return s;
}

// The message every rank got, or "" when `body` did not throw tower::AgreedError.
template <typename F> std::string agreed_error(F&& body)
{
	try {
		body();
	} catch (const AgreedError& e) {
		return e.what();
	}
	return {};
}

} // namespace

TEST_CASE("any parameters train through every lock-step strategy as a float64 loop over the global batch does")
{
	const Topology topology(world().comm(), std::nullopt);
	const Topology alone(MPI_COMM_SELF, std::nullopt);
	const std::vector<double> expected = float64_momentum(1.0, 6);
	std::vector<StrategyOptions> cases = {strategy("replicated"), strategy("parameter-server")};
	StrategyOptions no_overlap = strategy("replicated");
	no_overlap.replicated.overlap = false;
	cases.push_back(no_overlap);
	if (world().size() > 1)
		cases.push_back(strategy("parameter-server", 1));
	const std::vector<float> one_rank = train(alone, strategy("replicated"), 6, 1);
	for (const StrategyOptions& o : cases)
		for (int passes : {1, 2}) {
			CAPTURE(o.name);
			CAPTURE(o.ps_ranks);
			CAPTURE(o.replicated.overlap);
			CAPTURE(passes);
			const std::vector<float> here = train(topology, o, 6, passes);
			if (here.empty()) {
				CHECK(topology.rank() < o.ps_ranks); // a server holds no whole model
				continue;
			}
			CHECK(max_difference(here, expected) < 2e-6);
			std::vector<double> reference(one_rank.begin(), one_rank.end());
			CHECK(max_difference(here, reference) < 1e-6);
			// It trained: the start is far from where six steps lead.
			CHECK(max_difference(LeastSquares(1.0).values(), expected) > 1e-2);
		}
}

TEST_CASE("two optimizers in one program give what two programs give")
{
	const Topology topology(world().comm(), std::nullopt);
	const StrategyOptions second_kind = strategy(world().size() > 1 ? "parameter-server" : "replicated");
	std::vector<float> a_alone, b_alone;
	{
		LeastSquares a(1.0);
		DistributedOptimizer opt(topology, Device{}, a.parameters(), OptimizerConfig{}, strategy("replicated"));
		for (int s = 0; s < 5; ++s)
			train_step(opt, a, s);
		a_alone = a.values();
	}
	{
		LeastSquares b(2.0, 5000);
		DistributedOptimizer opt(topology, Device{}, b.parameters(), OptimizerConfig{}, second_kind);
		for (int s = 0; s < 5; ++s)
			train_step(opt, b, s);
		b_alone = b.values();
	}
	LeastSquares a(1.0), b(2.0, 5000);
	DistributedOptimizer opt_a(topology, Device{}, a.parameters(), OptimizerConfig{}, strategy("replicated"),
				   named("A"));
	DistributedOptimizer opt_b(topology, Device{}, b.parameters(), OptimizerConfig{}, second_kind, named("B"));
	for (int s = 0; s < 5; ++s) {
		train_step(opt_a, a, s);
		train_step(opt_b, b, s);
	}
	CHECK(a.values() == a_alone);
	CHECK(b.values() == b_alone);
	// Their variables stay apart by name, as a checkpoint holds them.
	CHECK(opt_a.variables().front().name == "A/w");
	CHECK(opt_b.variables().back().name.rfind("B/", 0) == 0);
}

TEST_CASE("an optimizer made with share= steps the one optimizer state, with a loss scale of its own")
{
	const Topology topology(world().comm(), std::nullopt);
	StrategyOptions o = strategy("replicated");
	o.gradients.loss_scale = parse_loss_scale("dynamic");
	o.gradients.loss_scale.log2_init = 10.0;
	LeastSquares program(1.0);
	DistributedOptimizer main(topology, Device{}, program.parameters(), OptimizerConfig{}, o, named("D"));
	DistributedOptimizer reg(main, "D_reg");
	train_step(main, program, 0);
	train_step(reg, program, 1);
	train_step(main, program, 2);
	// One momentum buffer carried through all three steps, as one optimizer would.
	CHECK(max_difference(program.values(), float64_momentum(1.0, 3)) < 2e-6);
	CHECK(main.loss_scaler().log2_scale() == doctest::Approx(10.001));
	CHECK(reg.loss_scaler().log2_scale() == doctest::Approx(10.0005));
	// The shared optimizer's state is saved once, by the optimizer that owns it.
	CHECK(reg.variables().size() == 2); // its loss-scale state only
	CHECK(reg.variables().front().name.rfind("D_reg/loss_scale", 0) == 0);

	SUBCASE("reset through either zeroes the one state")
	{
		reg.reset_optimizer_state();
		for (const NamedTensor& v : main.variables()) {
			if (v.name.find("/momentum") != std::string::npos)
				for (float x : v.tensor.to_host_f32())
					CHECK(x == 0.0f);
			if (v.name == "D/optimizer/step")
				CHECK(*v.tensor.data_as<int64_t>() == 0);
		}
		train_step(main, program, 3);
		CHECK(max_difference(program.values(), float64_momentum(1.0, 4, 0, 3)) < 2e-6);
	}
	SUBCASE("one of the two may be inside a step at a time")
	{
		main.begin_step();
		CHECK_THROWS_WITH_AS(reg.begin_step(), doctest::Contains("while 'D', which shares its state, is inside one"), Error);
	}
}

TEST_CASE("a gradient one rank never reports is an error on every rank naming it and the rank")
{
	const Topology topology(world().comm(), std::nullopt);
	LeastSquares program(1.0);
	DistributedOptimizer opt(topology, Device{}, program.parameters(), OptimizerConfig{}, strategy("replicated"));
	const int forgetful = world().size() - 1;
	const std::string message = agreed_error([&] {
		opt.begin_step();
		const int64_t share = global_batch / opt.workers();
		program.pass(opt.worker_index() * share, share, opt.backward_pass(), world().rank() == forgetful);
		opt.step(lr);
	});
	CHECK(message.find(fmt::format("rank {}: the gradient of 'b' was never reported ready", forgetful)) !=
	      std::string::npos);
	// The next step goes on normally: nobody was left inside an all-reduce.
	CHECK_NOTHROW(train_step(opt, program, 1));
	CHECK_NOTHROW(opt.check_replicas());
}

TEST_CASE("a parameter list that differs on one rank is an error on every rank")
{
	if (world().size() == 1)
		return;
	const Topology topology(world().comm(), std::nullopt);
	LeastSquares program(1.0);
	std::vector<Parameter*> list = program.parameters();
	if (world().rank() == world().size() - 1)
		std::swap(list[0], list[1]);
	const std::string message = agreed_error(
		[&] { DistributedOptimizer opt(topology, Device{}, list, OptimizerConfig{}, strategy("replicated")); });
	CHECK(message.find(fmt::format("rank {}: gradient list differs from rank 0's: entry 0 is 'b f32 [3]' here but "
				       "'w f32 [3, 4]' on rank 0", world().size() - 1)) != std::string::npos);
}

TEST_CASE("the protocol's mistakes are errors that say what to call")
{
	const Topology topology(world().comm(), std::nullopt);
	LeastSquares program(1.0);
	DistributedOptimizer opt(topology, Device{}, program.parameters(), OptimizerConfig{}, strategy("replicated"));
	CHECK_THROWS_WITH_AS(opt.step(lr), doctest::Contains("step() without a last backward_pass()"), Error);
	opt.backward_pass(true);
	CHECK_THROWS_WITH_AS(opt.backward_pass(true), doctest::Contains("call step() first"), Error);
}

TEST_CASE("async workers fetch in begin_step(), and a backward pass without it is refused")
{
	if (world().size() == 1)
		return;
	const Topology topology(world().comm(), std::nullopt);
	LeastSquares program(1.0);
	DistributedOptimizer opt(topology, Device{}, program.parameters(), OptimizerConfig{}, strategy("async"));
	CHECK_THROWS_WITH_AS(opt.backward_pass(), doctest::Contains("call begin_step() before the step's first forward"),
			     Error);
	DetachedPlan plan;
	plan.planned_steps = 8;
	plan.lr = [](int64_t) { return lr; };
	opt.detached()->start(plan);
	int64_t steps = 0;
	while (steps < 1000 && opt.begin_step()) {
		const int64_t share = global_batch / opt.workers();
		program.pass((steps % 10) * global_batch + opt.worker_index() * share, share, opt.backward_pass());
		opt.step(lr, {share, 0.0});
		++steps;
	}
	const nlohmann::json totals = opt.detached()->finish();
	CHECK(steps > 0);
	CHECK(totals.at("updates").get<int64_t>() > 0);
	CHECK_NOTHROW(opt.check_replicas());
	CHECK(max_difference(program.values(), float64_momentum(1.0, 0)) > 1e-3); // it moved
}
