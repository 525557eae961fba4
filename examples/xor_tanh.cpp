// A program of its own built against the installed tower: its own layer (tanh), its own model and
// its own data (noisy XOR in two dimensions), trained data-parallel by tower's Trainer.
//
// Build and run (docs/library.md walks through it):
//   g++ -O2 xor_tanh.cpp $(pkg-config --cflags --libs tower) -o xor_tanh
//   mpirun -np 2 ./xor_tanh --strategy replicated --allreduce ring
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/options/names.h"
#include "models/layers/flatten.h"
#include "models/layers/layer.h"
#include "models/layers/linear.h"
#include "models/sequential.h"
#include "base/error.h"
#include "base/mpi/topology.h"
#include "base/mpi/world.h"
#include "data/fashion_mnist.h"
#include "runtime/observe/run_report.h"
#include "runtime/training/trainer.h"

namespace {

// y = tanh(x), elementwise, on the CPU. tower's layers keep what backward needs from forward;
// here that is y, since dtanh(x)/dx = 1 - y^2.
class Tanh final : public tower::Layer {
public:
	const tower::Tensor& forward(const tower::Tensor& x) override
	{
		y_ = tower::Tensor::empty(x.shape(), tower::DType::f32, x.device());
		const float* in = x.data_as<float>();
		float* out = y_.data_as<float>();
		for (int64_t i = 0; i < x.numel(); ++i)
			out[i] = std::tanh(in[i]);
		return y_;
	}

	const tower::Tensor& backward(const tower::Tensor& dy, const tower::BackwardArgs& args) override
	{
		if (!args.need_input_grad)
			return dx_ = tower::Tensor{};
		dx_ = tower::Tensor::empty(dy.shape(), tower::DType::f32, dy.device());
		const float* y = y_.data_as<float>();
		const float* g = dy.data_as<float>();
		float* dx = dx_.data_as<float>();
		for (int64_t i = 0; i < dy.numel(); ++i)
			dx[i] = g[i] * (1.0f - y[i] * y[i]);
		return dx_;
	}

private:
	tower::Tensor y_, dx_;
};

// Points in [-1, 1]^2; the class is whether x and y have the same sign (XOR), which no linear
// model separates. Every rank makes the same data from the same seed; the trainer shards it.
tower::Dataset make_xor(int64_t count, uint64_t seed)
{
	tower::Dataset d;
	d.count = count;
	d.rows = 1;
	d.cols = 2;
	std::mt19937_64 random(seed);
	std::uniform_real_distribution<float> coordinate(-1.0f, 1.0f);
	for (int64_t i = 0; i < count; ++i) {
		const float x = coordinate(random), y = coordinate(random);
		d.images.push_back(x);
		d.images.push_back(y);
		d.labels.push_back((x > 0) == (y > 0) ? 1 : 0);
	}
	return d;
}

std::unique_ptr<tower::Model> make_model(int64_t hidden, const tower::Device& device)
{
	std::vector<std::unique_ptr<tower::Layer>> layers;
	layers.push_back(std::make_unique<tower::Flatten>());
	layers.push_back(std::make_unique<tower::Linear>("hidden", 2, hidden, tower::Activation::none, 7, device));
	layers.push_back(std::make_unique<Tanh>());
	layers.push_back(std::make_unique<tower::Linear>("out", hidden, 2, tower::Activation::none, 7, device));
	// The model ends in softmax cross-entropy over the last layer's two outputs.
	return std::make_unique<tower::SequentialModel>(std::move(layers), device);
}

struct Options {
	std::string strategy = "replicated";
	std::string allreduce = "ring";
	int epochs = 5;
	std::string metrics;
};

Options parse(int argc, char** argv)
{
	Options o;
	for (int i = 1; i + 1 < argc; i += 2) {
		const std::string flag = argv[i], value = argv[i + 1];
		if (flag == "--strategy")
			o.strategy = value;
		else if (flag == "--allreduce")
			o.allreduce = value;
		else if (flag == "--epochs")
			o.epochs = std::atoi(value.c_str());
		else if (flag == "--metrics")
			o.metrics = value;
		else
			throw tower::AgreedError("unknown option " + flag +
						 "; use --strategy NAME, --allreduce MODE, --epochs N, --metrics FILE");
	}
	return o;
}

int train(const tower::World& world, const Options& o)
{
	const tower::Topology topology(world.comm(), std::nullopt);
	const tower::Device cpu; // this example's Tanh runs on the host
	const tower::Dataset train = make_xor(8192, 1), test = make_xor(2048, 2);
	const auto model = make_model(16, cpu);

	tower::TrainerConfig config;
	config.strategy.name = o.strategy;
	config.strategy.replicated.mode = tower::parse_all_reduce_mode(o.allreduce);
	config.optimizer.name = "momentum";
	config.schedule.base_lr = 0.1f;
	config.epochs = o.epochs;
	config.batch = 64; // per rank
	config.log_every = 1000;
	config.labels = {{"model", "xor_tanh"}};

	// Progress on rank 0's standard output and the metrics file, as tower train reports.
	tower::RunReport report(world.comm(), o.metrics);
	tower::Trainer trainer(topology, cpu, *model, train, test, config, &report);
	const tower::RunResult result = trainer.run();
	if (world.rank() == 0)
		std::printf("xor_tanh: %s strategy, %s, %d rank(s): test accuracy %.3f after %lld steps\n",
			    o.strategy.c_str(), result.transport.c_str(), world.size(), result.test_accuracy.value_or(0),
			    static_cast<long long>(result.steps));
	return 0;
}

} // namespace

int main(int argc, char** argv)
{
	tower::World world(&argc, &argv);
	try {
		return train(world, parse(argc, argv));
	} catch (const tower::AgreedError& e) {
		// Every rank saw the same problem: each says so and all leave together.
		std::fprintf(stderr, "[rank %d] error: %s\n", world.rank(), e.what());
		return 2;
	}
}
