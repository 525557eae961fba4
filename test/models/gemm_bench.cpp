// GFLOP/s of the MLP's GEMMs on one CPU core: alone, as the training step issues them, and the
// rate the whole step reaches, so the gap between a step and its kernels is visible.
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/options/run_fields.h"
#include "models/kernels/cpu/cpu_threads.h"
#include "models/init.h"
#include "models/model_factory.h"
#include "models/kernels/ops.h"

using namespace tower;

namespace {

// One GEMM of a training step of the MLP: c[m, n] = op(a)[m, k] * op(b)[k, n].
struct StepGemm {
	const char* role;
	int64_t m, k, n;
	Transpose ta, tb;
};

// The GEMMs of one step of the MLP 784 -> hidden (x depth) -> 10, in the order Linear issues them.
std::vector<StepGemm> mlp_step_gemms(int64_t batch, int64_t hidden, int64_t depth)
{
	std::vector<int64_t> widths = {784};
	for (int64_t i = 0; i < depth; ++i)
		widths.push_back(hidden);
	widths.push_back(10);
	std::vector<StepGemm> gemms;
	for (size_t l = 0; l + 1 < widths.size(); ++l)
		gemms.push_back({"forward x W^T", batch, widths[l], widths[l + 1], Transpose::no, Transpose::yes});
	for (size_t l = widths.size() - 1; l-- > 0;) {
		gemms.push_back({"weight dz^T x", widths[l + 1], batch, widths[l], Transpose::yes, Transpose::no});
		if (l > 0)
			gemms.push_back({"input dz W", batch, widths[l + 1], widths[l], Transpose::no, Transpose::no});
	}
	return gemms;
}

double flops(const StepGemm& g)
{
	return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.k) * static_cast<double>(g.n);
}

// Seconds per call of `body`, after warm-up calls, over at least `min_seconds`.
double seconds_per_call(const std::function<void()>& body, double min_seconds)
{
	for (int i = 0; i < 3; ++i)
		body();
	int calls = 0;
	const auto start = std::chrono::steady_clock::now();
	double elapsed = 0.0;
	do {
		body();
		++calls;
		elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	} while (elapsed < min_seconds);
	return elapsed / calls;
}

struct Operands {
	Tensor a, b, c;
};

Operands operands_for(const StepGemm& g, DType dtype)
{
	const Shape a = g.ta == Transpose::yes ? Shape{g.k, g.m} : Shape{g.m, g.k};
	const Shape b = g.tb == Transpose::yes ? Shape{g.n, g.k} : Shape{g.k, g.n};
	auto make = [&](const Shape& s, const char* name) {
		const Tensor f32 = Tensor::from_host(seeded_uniform(name, 0, shape_numel(s), 1.0f), s, Device{});
		Tensor t = Tensor::empty(s, dtype, Device{});
		cpu_ops().cast(f32, t, false);
		return t;
	};
	return {make(a, "a"), make(b, "b"), Tensor::zeros({g.m, g.n}, dtype, Device{})};
}

} // namespace

int main(int argc, char** argv)
{
	CLI::App app("gemm_bench: the MLP's GEMMs alone and inside a training step, on this process's CPU threads");
	int64_t batch = 128;
	std::string precision = "fp32";
	double min_seconds = 0.3;
	int steps = 20;
	int threads = 1;
	app.add_option("--batch", batch, "samples per step");
	app.add_option("--precision", precision, "fp32, fp16 or bf16");
	app.add_option("--min-seconds", min_seconds, "time spent on each GEMM shape");
	app.add_option("--steps", steps, "timed training steps");
	app.add_option("--threads", threads, "CPU kernel threads");
	CLI11_PARSE(app, argc, argv);
	set_cpu_threads(threads);
	ModelConfig config;
	config.name = "mlp";
	config.precision = parse_precision(precision);
	const DType dtype = config.precision;
	const auto gemms = mlp_step_gemms(batch, 1024, 2);

	std::printf("oneDNN %s, %s kernels, %d thread(s), %s, MLP 784-1024-1024-10 batch %lld\n", onednn_version(),
		    onednn_isa(), cpu_threads(), precision.c_str(), static_cast<long long>(batch));
	std::printf("%-14s %6s %6s %6s %12s %14s\n", "GEMM", "M", "K", "N", "ms", "GFLOP/s/core");
	double gemm_seconds = 0.0, step_flops = 0.0;
	for (const StepGemm& g : gemms) {
		const Operands o = operands_for(g, dtype);
		const double s = seconds_per_call([&] { cpu_ops().gemm(g.ta, g.tb, 1.0f, o.a, o.b, 0.0f, o.c); },
						  min_seconds);
		gemm_seconds += s;
		step_flops += flops(g);
		std::printf("%-14s %6lld %6lld %6lld %12.3f %14.1f\n", g.role, static_cast<long long>(g.m),
			    static_cast<long long>(g.k), static_cast<long long>(g.n), 1e3 * s,
			    flops(g) / s / 1e9 / cpu_threads());
	}

	auto model = make_model(config, Device{});
	const Tensor images =
		Tensor::from_host(seeded_uniform("bench", 0, batch * 784, 1.0f), {batch, 1, 28, 28}, Device{});
	Tensor labels = Tensor::empty({batch}, DType::i32, Device{});
	for (int64_t i = 0; i < batch; ++i)
		labels.data_as<int32_t>()[i] = static_cast<int32_t>(i % 10);
	const double step = seconds_per_call(
		[&] {
			for (int i = 0; i < steps; ++i) {
				model->forward(images, labels);
				model->backward({}, BackwardOptions{});
			}
		},
		0.0) / steps;
	std::printf("\n%-38s %10s %14s\n", "", "ms/step", "GFLOP/s/core");
	std::printf("%-38s %10.3f %14.1f\n", "the step's GEMMs alone, back to back", 1e3 * gemm_seconds,
		    step_flops / gemm_seconds / 1e9 / cpu_threads());
	std::printf("%-38s %10.3f %14.1f\n", "forward + backward of the model", 1e3 * step,
		    step_flops / step / 1e9 / cpu_threads());
	std::printf("GEMMs are %.0f%% of the step; the rest is bias, ReLU, softmax, casts and gradient copies.\n",
		    100.0 * gemm_seconds / step);
	return 0;
}
