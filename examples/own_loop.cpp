// A program that owns its loop, built against the installed tower: its own parameters and its
// own gradients (logistic regression written out by hand), stepped through tower's
// DistributedOptimizer under any strategy, async and sync-replicas included.
//
// Build and run (docs/library.md walks through it):
//   g++ -O2 own_loop.cpp $(pkg-config --cflags --libs tower) -o own_loop
//   mpirun -np 2 ./own_loop --strategy async
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/mpi/topology.h"
#include "base/mpi/world.h"
#include "collectives/tensor_collectives.h"
#include "runtime/distributed_optimizer.h"
#include "runtime/strategies/detached_run.h"

namespace {

constexpr int64_t batch = 32; // per worker and step
constexpr float lr = 0.5f;

// Two clouds of points in the plane, around (1, 1) (label 1) and (-1, -1) (label 0). Every rank
// makes the same data from the same seed.
struct Points {
	std::vector<float> x, y; // x: [n, 2], y: [n]
	int64_t size() const { return static_cast<int64_t>(y.size()); }
};

Points make_points(int64_t n, unsigned seed)
{
	std::mt19937 rng(seed);
	std::normal_distribution<float> noise(0.0f, 0.8f);
	Points p;
	for (int64_t i = 0; i < n; ++i) {
		const float label = static_cast<float>(i % 2), centre = label > 0 ? 1.0f : -1.0f;
		p.x.push_back(centre + noise(rng));
		p.x.push_back(centre + noise(rng));
		p.y.push_back(label);
	}
	return p;
}

// p(label 1 | x) = sigmoid(w . x + b): the parameters tower reduces and updates.
struct Logistic {
	// The gradients are allocated before the optimizer is made: it may move them into its buckets.
	tower::Parameter w{"w", zeros(2), zeros(2), {}};
	tower::Parameter b{"b", zeros(1), zeros(1), {}};

	static tower::Tensor zeros(int64_t n) { return tower::Tensor::zeros({n}, tower::DType::f32, tower::Device{}); }

	float probability(const float* x) const
	{
		const float* wv = w.value.data_as<float>();
		return 1.0f / (1.0f + std::exp(-(wv[0] * x[0] + wv[1] * x[1] + b.value.data_as<float>()[0])));
	}

	// The mean cross-entropy of samples [first, first + count) and its gradient, written into
	// the parameters' gradients scaled by `loss_scale`.
	double forward_backward(const Points& d, int64_t first, int64_t count, float loss_scale)
	{
		double loss = 0, gw0 = 0, gw1 = 0, gb = 0;
		for (int64_t k = 0; k < count; ++k) {
			const int64_t i = (first + k) % d.size();
			const float p = probability(&d.x[2 * i]), y = d.y[i];
			loss -= y * std::log(p + 1e-7f) + (1 - y) * std::log(1 - p + 1e-7f);
			gw0 += (p - y) * d.x[2 * i];
			gw1 += (p - y) * d.x[2 * i + 1];
			gb += p - y;
		}
		const double scale = loss_scale / static_cast<double>(count);
		w.grad.data_as<float>()[0] = static_cast<float>(gw0 * scale);
		w.grad.data_as<float>()[1] = static_cast<float>(gw1 * scale);
		b.grad.data_as<float>()[0] = static_cast<float>(gb * scale);
		return loss / static_cast<double>(count);
	}

	// Points of d[first, end) classified right.
	int64_t right(const Points& d, int64_t first, int64_t end) const
	{
		int64_t n = 0;
		for (int64_t i = first; i < end; ++i)
			n += (probability(&d.x[2 * i]) > 0.5f) == (d.y[i] > 0.5f) ? 1 : 0;
		return n;
	}
};

// One step of this worker: its share of the global batch at `step`.
void step(tower::DistributedOptimizer& opt, Logistic& model, const Points& train, int64_t step)
{
	const tower::BackwardPass pass = opt.backward_pass();
	const int64_t first = (step * opt.workers() + opt.worker_index()) * batch;
	const double loss = model.forward_backward(train, first, batch, pass.options.loss_scale);
	// Each gradient is final now: the replicated strategy may start reducing it (in a model of
	// many layers, while backward still computes the earlier ones).
	if (pass.on_ready)
		for (const tower::Parameter* p : {&model.w, &model.b})
			pass.on_ready(*p);
	opt.step(lr, {batch, loss});
}

// Async and sync-replicas: the workers run until the chief's last token; then every rank gets
// the final values. Returns the updates the owners applied.
int64_t train_detached(tower::DistributedOptimizer& opt, Logistic& model, const Points& train, int64_t steps)
{
	tower::DetachedRun* run = opt.detached();
	tower::DetachedPlan plan;
	plan.planned_steps = steps;
	plan.lr = [](int64_t) { return lr; };
	run->start(plan);
	for (int64_t k = 0; opt.is_worker() && opt.begin_step(); ++k)
		step(opt, model, train, k);
	return run->finish().at("updates").get<int64_t>();
}

int run(const tower::World& world, const std::string& strategy)
{
	const tower::Topology topology(world.comm(), std::nullopt);
	const Points train = make_points(4096, 1), test = make_points(1024, 2);
	Logistic model;
	tower::OptimizerConfig sgd;
	sgd.name = "sgd";
	tower::StrategyOptions options;
	options.name = strategy;
	tower::DistributedOptimizer opt(topology, tower::Device{}, {&model.w, &model.b}, sgd, options);
	const int64_t steps = 200;
	int64_t updates = steps;
	if (opt.detached() != nullptr)
		updates = train_detached(opt, model, train, steps);
	else
		for (int64_t k = 0; k < steps; ++k)
			if (opt.begin_step())
				step(opt, model, train, k);
	opt.check_replicas(); // collective: every worker holds the same parameters
	// Each rank scores its share of the test points; one all-reduce of the counts gives the whole.
	tower::TensorCollectives collectives(world.comm(), tower::Device{});
	tower::Tensor counts = tower::Tensor::zeros({2}, tower::DType::i64, tower::Device{});
	const int64_t first = test.size() * world.rank() / world.size(), end = test.size() * (world.rank() + 1) / world.size();
	counts.data_as<int64_t>()[0] = model.right(test, first, end);
	counts.data_as<int64_t>()[1] = end - first;
	collectives.all_reduce(counts, tower::ReduceOp::sum, "test counts");
	const int64_t* total = counts.data_as<int64_t>();
	const double accuracy = static_cast<double>(total[0]) / static_cast<double>(total[1]);
	if (world.rank() == 0)
		std::printf("own_loop: %s strategy, %d rank(s): test accuracy %.3f after %lld updates\n", strategy.c_str(),
			    world.size(), accuracy, static_cast<long long>(updates));
	return 0;
}

} // namespace

int main(int argc, char** argv)
{
	tower::World world(&argc, &argv);
	if (argc != 1 && !(argc == 3 && std::string(argv[1]) == "--strategy")) {
		std::fprintf(stderr, "[rank %d] error: usage: own_loop [--strategy NAME]\n", world.rank());
		return 2;
	}
	const std::string strategy = argc == 3 ? argv[2] : "replicated";
	try {
		return run(world, strategy);
	} catch (const tower::AgreedError& e) {
		// Every rank saw the same problem: each says so and all leave together.
		std::fprintf(stderr, "[rank %d] error: %s\n", world.rank(), e.what());
		return 2;
	}
}
