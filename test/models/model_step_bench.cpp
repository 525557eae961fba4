// Times forward+backward steps of a built-in model on the CPU and prints samples per second.
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "runtime/options/run_fields.h"
#include "models/init.h"
#include "models/model_factory.h"

using namespace tower;

int main(int argc, char** argv)
{
	CLI::App app("model_step_bench: forward+backward steps of a built-in model on one CPU core");
	ModelConfig config;
	int64_t batch = 128;
	int steps = 30;
	app.add_option("--model", config.name, "mlp or cnn");
	app.add_option("--hidden", config.hidden, "hidden width (0: the model's default)");
	app.add_option("--depth", config.depth, "mlp hidden layers");
	app.add_option("--batch", batch, "samples per step");
	app.add_option("--steps", steps, "timed steps (after 3 warm-up steps)");
	std::string precision = "fp32";
	app.add_option("--precision", precision, "compute type: fp32, fp16 or bf16");
	CLI11_PARSE(app, argc, argv);
	config.precision = parse_precision(precision);

	auto model = make_model(config, Device{});
	const Tensor images = Tensor::from_host(seeded_uniform("bench", 0, batch * 784, 1.0f), {batch, 1, 28, 28}, Device{});
	Tensor labels = Tensor::empty({batch}, DType::i32, Device{});
	for (int64_t i = 0; i < batch; ++i)
		labels.data_as<int32_t>()[i] = static_cast<int32_t>(i % 10);
	for (int i = 0; i < 3; ++i) {
		model->forward(images, labels);
		model->backward({}, BackwardOptions{});
	}
	const auto start = std::chrono::steady_clock::now();
	for (int i = 0; i < steps; ++i) {
		model->forward(images, labels);
		model->backward({}, BackwardOptions{});
	}
	const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	std::printf("model %s %s batch %lld: %.2f ms/step, %.0f samples/s\n", config.name.c_str(), precision.c_str(),
		    static_cast<long long>(batch), 1e3 * seconds / steps, static_cast<double>(batch) * steps / seconds);
	return 0;
}
