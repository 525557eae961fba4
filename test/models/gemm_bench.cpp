// GFLOP/s of a model's GEMMs on one CPU core: the MLP's alone, as the training step issues them,
// and the rate the whole step reaches, so the gap between a step and its kernels is visible; or the
// GPT's alone (--model gpt), the limit scripts/bench/step_profile holds the GPT's step against.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/options/run_fields.h"
#include "models/kernels/cpu/cpu_threads.h"
#include "models/init.h"
#include "models/layers/causal_self_attention.h"
#include "models/model_factory.h"
#include "models/kernels/ops.h"

using namespace tower;

namespace {

// One GEMM of a training step: c[m, n] = op(a)[m, k] * op(b)[k, n], `batch` of them at once
// through gemm_batched when batch > 0 (attention's per-head products, timed whole here; the step
// computes `share` of them, by causal blocks).
struct StepGemm {
	const char* role;
	int64_t m, k, n;
	Transpose ta, tb;
	int64_t batch = 0;
	double share = 1.0;
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

// The three GEMMs of a linear layer [rows, in] -> [rows, out] (W is [out, in]), as Linear issues them.
void add_linear(std::vector<StepGemm>& gemms, const char* forward, const char* weight, const char* input,
		int64_t rows, int64_t in, int64_t out)
{
	gemms.push_back({forward, rows, in, out, Transpose::no, Transpose::yes});
	gemms.push_back({weight, out, rows, in, Transpose::yes, Transpose::no});
	gemms.push_back({input, rows, out, in, Transpose::no, Transpose::no});
}

// The GEMMs of one step of the GPT (models/gpt.cpp): every block's four linear layers and six
// per-head attention products (where the step runs them on oneDNN: not where the CPU's own f32
// attention kernels run), and the tied embedding's output layer, each shape once with how many
// times a step runs it in `repeats`.
std::vector<StepGemm> gpt_step_gemms(const GptOptions& o, int64_t windows, bool attention, std::vector<int>& repeats)
{
	const int64_t rows = windows * o.context, w = o.width, t = o.context, d = o.width / o.heads;
	const int64_t heads = windows * o.heads;
	const int layers = static_cast<int>(o.layers);
	std::vector<StepGemm> gemms;
	add_linear(gemms, "qkv x W^T", "qkv dz^T x", "qkv dz W", rows, w, 3 * w);
	add_linear(gemms, "attn.proj x W^T", "attn.proj dz^T x", "attn.proj dz W", rows, w, w);
	add_linear(gemms, "fc x W^T", "fc dz^T x", "fc dz W", rows, w, 4 * w);
	add_linear(gemms, "mlp.proj x W^T", "mlp.proj dz^T x", "mlp.proj dz W", rows, 4 * w, w);
	const double share = causal_block_share(t);
	if (attention) {
		gemms.push_back({"scores q k^T", t, d, t, Transpose::no, Transpose::yes, heads, share});
		gemms.push_back({"y = P v", t, t, d, Transpose::no, Transpose::no, heads, share});
		gemms.push_back({"dP = dy v^T", t, d, t, Transpose::no, Transpose::yes, heads, share});
		gemms.push_back({"dv = P^T dy", t, t, d, Transpose::yes, Transpose::no, heads, share});
		gemms.push_back({"dq = dS k", t, t, d, Transpose::no, Transpose::no, heads, share});
		gemms.push_back({"dk = dS^T q", t, t, d, Transpose::yes, Transpose::no, heads, share});
	}
	repeats.assign(gemms.size(), layers);
	gemms.push_back({"logits x E^T", rows, w, o.vocab, Transpose::no, Transpose::yes});
	gemms.push_back({"dx = dlogits E", rows, o.vocab, w, Transpose::no, Transpose::no});
	gemms.push_back({"dE = dlogits^T x", o.vocab, rows, w, Transpose::yes, Transpose::no});
	repeats.resize(gemms.size(), 1);
	return gemms;
}

double flops(const StepGemm& g)
{
	return 2.0 * static_cast<double>(std::max<int64_t>(g.batch, 1)) * static_cast<double>(g.m) *
	       static_cast<double>(g.k) * static_cast<double>(g.n);
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

// --cold: every timed call finds its operands out of the caches, as a step's GEMMs find the
// activations written layers before (64 MiB written between calls, twice a 32 MiB L3; only the
// call is timed, but it may meet the write-backs of those lines: read instead of written, they
// gave the same times within their spread in a oneDNN test program on a Zen 5).
bool cold_operands = false;

const char* operands_where()
{
	return cold_operands ? "each call's operands out of the caches (--cold)" : "operands in cache, back to back";
}

double seconds_per_cold_call(const std::function<void()>& body, double min_seconds)
{
	static std::vector<float> evict(16 << 20);
	body();
	double timed = 0.0;
	int calls = 0;
	const auto start = std::chrono::steady_clock::now();
	do {
		for (size_t i = 0; i < evict.size(); i += 16)
			evict[i] += 1.0f;
		const auto before = std::chrono::steady_clock::now();
		body();
		timed += std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
		++calls;
	} while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < min_seconds);
	return timed / calls;
}

struct Operands {
	Tensor a, b, c;
};

Operands operands_for(const StepGemm& g, DType dtype)
{
	Shape a = g.ta == Transpose::yes ? Shape{g.k, g.m} : Shape{g.m, g.k};
	Shape b = g.tb == Transpose::yes ? Shape{g.n, g.k} : Shape{g.k, g.n};
	Shape c = {g.m, g.n};
	if (g.batch > 0)
		for (Shape* s : {&a, &b, &c})
			s->insert(s->begin(), g.batch);
	auto make = [&](const Shape& s, const char* name) {
		const Tensor f32 = Tensor::from_host(seeded_uniform(name, 0, shape_numel(s), 1.0f), s, Device{});
		Tensor t = Tensor::empty(s, dtype, Device{});
		cpu_ops().cast(f32, t, false);
		return t;
	};
	return {make(a, "a"), make(b, "b"), Tensor::zeros(c, dtype, Device{})};
}

double time_gemm(const StepGemm& g, DType dtype, double min_seconds)
{
	const Operands o = operands_for(g, dtype);
	const auto timer = cold_operands ? seconds_per_cold_call : seconds_per_call;
	if (g.batch > 0)
		return timer([&] { cpu_ops().gemm_batched(g.ta, g.tb, 1.0f, o.a, o.b, 0.0f, o.c); }, min_seconds);
	return timer([&] { cpu_ops().gemm(g.ta, g.tb, 1.0f, o.a, o.b, 0.0f, o.c); }, min_seconds);
}

// The GPT's GEMMs alone: each shape's rate, the step's GEMMs back to back, and the largest shape's
// rate, the core's GEMM peak for this model.
int bench_gpt(const ModelConfig& config, int64_t windows, double min_seconds)
{
	const GptOptions o = gpt_options(config);
	std::vector<int> repeats;
	const bool attention = ops_for(Device{}).causal_attention_uses_room(config.precision);
	const auto gemms = gpt_step_gemms(o, windows, attention, repeats);
	std::printf("oneDNN %s, %s kernels, %d thread(s), %s, GPT %lld layers width %lld heads %lld context %lld, "
		    "%lld windows; %s\n",
		    onednn_version(), onednn_isa(), cpu_threads(), std::string(dtype_name(config.precision)).c_str(),
		    static_cast<long long>(o.layers), static_cast<long long>(o.width), static_cast<long long>(o.heads),
		    static_cast<long long>(o.context), static_cast<long long>(windows), operands_where());
	std::printf("%-18s %6s %6s %6s %6s %6s %10s %14s\n", "GEMM", "batch", "M", "K", "N", "x/step", "ms",
		    "GFLOP/s/core");
	// Attention's products are timed whole; the step computes their causal share, counted as that
	// share of the time and of the FLOPs.
	double seconds = 0.0, step_flops = 0.0, peak = 0.0, largest = 0.0;
	for (size_t i = 0; i < gemms.size(); ++i) {
		const StepGemm& g = gemms[i];
		const double s = time_gemm(g, config.precision, min_seconds);
		const double rate = flops(g) / s / 1e9 / cpu_threads();
		seconds += repeats[i] * g.share * s;
		step_flops += repeats[i] * g.share * flops(g);
		if (flops(g) > largest) {
			largest = flops(g);
			peak = rate;
		}
		std::printf("%-18s %6lld %6lld %6lld %6lld %6d %10.3f %14.1f\n", g.role, static_cast<long long>(g.batch),
			    static_cast<long long>(g.m), static_cast<long long>(g.k), static_cast<long long>(g.n),
			    repeats[i], 1e3 * s, rate);
	}
	if (attention)
		std::printf("attention's products are timed whole; the step computes %.3f of them (causal blocks of %lld)\n",
			    causal_block_share(o.context), static_cast<long long>(causal_block_positions));
	else
		std::printf("attention runs on tower's own %s kernels (models/kernels/cpu/attention_f32.cpp), not here\n",
			    std::string(dtype_name(config.precision)).c_str());
	std::printf("the step's GEMMs alone: %.2f GFLOP in %.3f ms, %.1f GFLOP/s/core; largest shape %.1f GFLOP/s/core\n",
		    step_flops / 1e9, 1e3 * seconds, step_flops / seconds / 1e9 / cpu_threads(), peak);
	return 0;
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
	std::string model_name = "mlp";
	app.add_option("--model", model_name, "mlp (its GEMMs and its step) or gpt (its GEMMs alone)")
		->check(CLI::IsMember({"mlp", "gpt"}));
	app.add_option("--batch", batch, "samples per step (gpt: windows per step; default 8)");
	app.add_option("--precision", precision, "fp32, fp16 or bf16");
	app.add_option("--min-seconds", min_seconds, "time spent on each GEMM shape");
	app.add_option("--steps", steps, "timed training steps");
	app.add_option("--threads", threads, "CPU kernel threads");
	app.add_flag("--cold", cold_operands, "time each call with its operands out of every cache (64 MiB written before it)");
	CLI11_PARSE(app, argc, argv);
	set_cpu_threads(threads);
	ModelConfig config;
	config.name = "mlp";
	config.precision = parse_precision(precision);
	const DType dtype = config.precision;
	if (model_name == "gpt") {
		config.name = "gpt";
		return bench_gpt(config, app.count("--batch") > 0 ? batch : 8, min_seconds);
	}
	const auto gemms = mlp_step_gemms(batch, 1024, 2);

	std::printf("oneDNN %s, %s kernels, %d thread(s), %s, MLP 784-1024-1024-10 batch %lld; %s\n", onednn_version(),
		    onednn_isa(), cpu_threads(), precision.c_str(), static_cast<long long>(batch), operands_where());
	std::printf("%-14s %6s %6s %6s %12s %14s\n", "GEMM", "M", "K", "N", "ms", "GFLOP/s/core");
	double gemm_seconds = 0.0, step_flops = 0.0;
	for (const StepGemm& g : gemms) {
		const double s = time_gemm(g, dtype, min_seconds);
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
	std::printf("%-38s %10.3f %14.1f\n",
		    cold_operands ? "the step's GEMMs alone, operands cold" : "the step's GEMMs alone, back to back",
		    1e3 * gemm_seconds,
		    step_flops / gemm_seconds / 1e9 / cpu_threads());
	std::printf("%-38s %10.3f %14.1f\n", "forward + backward of the model", 1e3 * step,
		    step_flops / step / 1e9 / cpu_threads());
	std::printf("GEMMs are %.0f%% of the step; the rest is bias, ReLU, softmax, casts and gradient copies.\n",
		    100.0 * gemm_seconds / step);
	return 0;
}
