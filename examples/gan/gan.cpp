// A GAN on Fashion-MNIST trained the way the StyleGAN2 seed trains one, through tower's gradient-level
// API: a distributed optimizer each for G and D, lazy R1 regularization of D through a third
// that shares D's optimizer state, dynamic loss scaling per optimizer under --precision fp16, a
// reset of optimizer state when the training phase changes, and checkpoints of all three.
//
// Build and run (docs/library.md walks through it):
//   make -C examples/gan                  # pkg-config finds the installed tower
//   mpirun -np 2 examples/gan/gan --steps 3000 --batch 64 --out /tmp/gan
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/options/names.h"
#include "base/error.h"
#include "base/mpi/topology.h"
#include "base/mpi/world.h"
#include "data/fashion_mnist.h"
#include "data/sampler.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/distributed_optimizer.h"
#include "runtime/observe/metrics_log.h"

#include "networks.h"
#include "png.h"

namespace {

using tower::Tensor;

struct Options {
	int64_t steps = 3000;     // about 25 s at 2 ranks on 2 cores; clothes, not noise
	int64_t batch = 64; // global: split over the workers
	std::string out = "gan-out";
	std::string strategy = "replicated";
	int ps_ranks = 0;
	std::string precision = "fp32";
	float lr = 2e-4f;
	int64_t hidden = 256;
	int64_t r1_every = 16;    // lazy regularization: R1 every this many steps, weighted by it
	double r1_weight = 1.0;   // the seed's gamma
	int64_t reset_at = -1;    // the step where a new phase resets both optimizers; -1: half-way
	int64_t log_every = 10;
	int64_t checkpoint_every = 0;
	bool resume = false;
	uint64_t seed = 1;
	std::string data = tower::default_fashion_mnist_dir();
};

Options parse(int argc, char** argv)
{
	Options o;
	const std::string usage = "use --steps N --batch B --out DIR --strategy replicated|parameter-server "
				  "--ps-ranks K --precision fp32|fp16|bf16 --lr X --hidden N --r1-every K --r1-weight G "
				  "--reset-at STEP --log-every N --checkpoint-every N --resume --seed S --data DIR";
	for (int i = 1; i < argc; ++i) {
		const std::string flag = argv[i];
		if (flag == "--resume") {
			o.resume = true;
			continue;
		}
		if (i + 1 >= argc)
			throw tower::AgreedError(fmt::format("{} needs a value; {}", flag, usage));
		const std::string v = argv[++i];
		if (flag == "--steps") o.steps = std::stoll(v);
		else if (flag == "--batch") o.batch = std::stoll(v);
		else if (flag == "--out") o.out = v;
		else if (flag == "--strategy") o.strategy = v;
		else if (flag == "--ps-ranks") o.ps_ranks = std::stoi(v);
		else if (flag == "--precision") o.precision = v;
		else if (flag == "--lr") o.lr = std::stof(v);
		else if (flag == "--hidden") o.hidden = std::stoll(v);
		else if (flag == "--r1-every") o.r1_every = std::stoll(v);
		else if (flag == "--r1-weight") o.r1_weight = std::stod(v);
		else if (flag == "--reset-at") o.reset_at = std::stoll(v);
		else if (flag == "--log-every") o.log_every = std::stoll(v);
		else if (flag == "--checkpoint-every") o.checkpoint_every = std::stoll(v);
		else if (flag == "--seed") o.seed = std::stoull(v);
		else if (flag == "--data") o.data = v;
		else throw tower::AgreedError(fmt::format("unknown option {}; {}", flag, usage));
	}
	if (o.steps < 1 || o.batch < 1 || o.hidden < 1 || o.r1_every < 1 || o.log_every < 1 || o.checkpoint_every < 0)
		throw tower::AgreedError("--steps, --batch, --hidden, --r1-every and --log-every must be positive, "
					 "--checkpoint-every 0 or more");
	if (o.strategy != "replicated" && o.strategy != "parameter-server")
		throw tower::AgreedError(fmt::format("--strategy {}: the GAN alternates G and D steps in lock-step, so it "
						     "trains with replicated or parameter-server (async and sync-replicas "
						     "would apply G's and D's updates at different times on each worker)",
						     o.strategy));
	if (o.reset_at < 0)
		o.reset_at = o.steps / 2;
	return o;
}

tower::DType compute_type(const std::string& precision)
{
	if (precision == "fp32") return tower::DType::f32;
	if (precision == "fp16") return tower::DType::f16;
	if (precision == "bf16") return tower::DType::bf16;
	throw tower::AgreedError(fmt::format("--precision {}: use fp32, fp16 or bf16", precision));
}

// A standard normal value for (seed, stream, index), the same on every rank and at every world
// size: global sample i of a step draws the same latent whoever computes it.
float normal(uint64_t seed, uint64_t stream, uint64_t index)
{
	auto mix = [](uint64_t x) {
		x += 0x9e3779b97f4a7c15ull;
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
		x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
		return x ^ (x >> 31);
	};
	const uint64_t a = mix(seed ^ mix(stream ^ mix(2 * index)));
	const uint64_t b = mix(seed ^ mix(stream ^ mix(2 * index + 1)));
	const double u1 = (static_cast<double>(a >> 11) + 0.5) / 9007199254740992.0;
	const double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
	return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Latents [count, 64] for global samples first.. of `stream` (a step and a purpose).
Tensor latents(uint64_t seed, uint64_t stream, int64_t first, int64_t count)
{
	std::vector<float> z(static_cast<size_t>(count * gan::latent_size));
	for (int64_t i = 0; i < count * gan::latent_size; ++i)
		z[static_cast<size_t>(i)] = normal(seed, stream, static_cast<uint64_t>(first * gan::latent_size + i));
	return Tensor::from_host(z, {count, gan::latent_size}, tower::Device{});
}

// Fashion-MNIST images of `indices`, then `extra` in front, scaled from [0, 1] to [-1, 1].
Tensor real_images(const tower::Dataset& data, std::span<const int64_t> indices, const Tensor* fake_first)
{
	const int64_t fakes = fake_first ? fake_first->dim(0) : 0;
	std::vector<float> x(static_cast<size_t>((fakes + static_cast<int64_t>(indices.size())) * gan::image_size));
	if (fake_first)
		std::copy_n(fake_first->data_as<float>(), fake_first->numel(), x.begin());
	size_t at = static_cast<size_t>(fakes * gan::image_size);
	for (int64_t i : indices)
		for (int64_t p = 0; p < gan::image_size; ++p)
			x[at++] = 2.0f * data.images[static_cast<size_t>(i * gan::image_size + p)] - 1.0f;
	return Tensor::from_host(x, {fakes + static_cast<int64_t>(indices.size()), gan::image_size}, tower::Device{});
}

// Streams of latents: one per step and purpose.
enum Purpose : uint64_t { for_g = 0, for_d = 1, for_picture = 2 };
uint64_t stream(int64_t step, Purpose p) { return static_cast<uint64_t>(step) * 4 + p; }

double sum_over_ranks(double value)
{
	MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	return value;
}

// Adam as GANs use it. With lazy regularization D takes r1_every + 1 steps per r1_every of G's,
// so, as the seed does, its betas are raised to the power ratio = r1_every / (r1_every + 1) (and its
// learning rate multiplied by it) to keep their span in minibatches.
tower::OptimizerConfig adam(double ratio = 1.0)
{
	tower::OptimizerConfig c;
	c.name = "adam";
	c.beta1 = static_cast<float>(std::pow(0.5, ratio));
	c.beta2 = static_cast<float>(std::pow(0.99, ratio));
	return c;
}

double lazy_ratio(const Options& o)
{
	return static_cast<double>(o.r1_every) / static_cast<double>(o.r1_every + 1);
}

class Training {
public:
	Training(const tower::World& world, const Options& o);
	void run();

private:
	tower::StrategyOptions strategy_options() const;
	tower::CheckpointConfig checkpoint_config() const;
	static tower::DistributedOptimizerSettings settings(const std::string& name, tower::DType type);
	double generator_step(int64_t step);
	double discriminator_step(int64_t step, std::span<const int64_t> real);
	double r1_step(std::span<const int64_t> real);
	void log(int64_t step, double start_s);
	float d_lr() const { return static_cast<float>(o_.lr * lazy_ratio(o_)); }
	void write_picture();

	const Options o_;
	const tower::Topology topology_;
	const tower::DType type_;
	const tower::Dataset data_;
	gan::Generator g_;
	gan::Discriminator d_;
	tower::DistributedOptimizer g_opt_, d_opt_, d_reg_opt_;
	tower::MetricsLog metrics_;
	tower::Checkpointer checkpointer_;
	std::optional<tower::DistributedSampler> sampler_;
	int64_t per_worker_ = 0;
	double loss_g_ = 0, loss_d_ = 0, r1_ = 0; // sums since the last log line
	int64_t logged_steps_ = 0, r1_steps_ = 0, skipped_ = 0;
};

tower::StrategyOptions Training::strategy_options() const
{
	tower::StrategyOptions s;
	s.name = o_.strategy;
	s.ps_ranks = o_.ps_ranks;
	if (type_ == tower::DType::f16) {
		// Each optimizer scales its own loss: G's, D's and the R1 penalty's gradients differ by
		// orders of magnitude. 2^16 to start, as PyTorch's GradScaler does.
		s.gradients.loss_scale = tower::parse_loss_scale("dynamic");
		s.gradients.loss_scale.log2_init = 16;
	}
	return s;
}

tower::DistributedOptimizerSettings Training::settings(const std::string& name, tower::DType type)
{
	tower::DistributedOptimizerSettings s;
	s.name = name;
	s.compute_type = type;
	return s;
}

tower::CheckpointConfig Training::checkpoint_config() const
{
	tower::CheckpointConfig c;
	if (o_.checkpoint_every > 0 || o_.resume)
		c.dir = (std::filesystem::path(o_.out) / "checkpoints").string();
	c.every = o_.checkpoint_every;
	c.keep = 2;
	c.resume = o_.resume;
	c.identity = {{"batch", o_.batch}, {"strategy", o_.strategy}, {"ps_ranks", o_.ps_ranks},
		      {"precision", o_.precision}, {"lr", o_.lr}, {"hidden", o_.hidden}, {"r1_every", o_.r1_every},
		      {"r1_weight", o_.r1_weight}, {"reset_at", o_.reset_at}, {"seed", o_.seed}};
	return c;
}

Training::Training(const tower::World& world, const Options& o)
	: o_(o), topology_(world.comm(), std::nullopt), type_(compute_type(o.precision)),
	  data_(tower::load_fashion_mnist_agreed(world.comm(), o.data, tower::Split::train)),
	  g_(o.hidden, o.seed, type_), d_(o.hidden, o.seed + 1, type_),
	  g_opt_(topology_, tower::Device{}, g_.parameters(), adam(), strategy_options(), settings("G", type_)),
	  d_opt_(topology_, tower::Device{}, d_.parameters(), adam(lazy_ratio(o)), strategy_options(), settings("D", type_)),
	  d_reg_opt_(d_opt_, "D_reg"),
	  metrics_(world.rank() == 0 ? tower::MetricsLog((std::filesystem::path(o.out) / "metrics.jsonl").string())
				     : tower::MetricsLog()),
	  checkpointer_(topology_, checkpoint_config(), {&g_opt_, &d_opt_, &d_reg_opt_}, "gan-" + o.strategy,
			[&](const std::string& line) {
				if (world.rank() == 0)
					std::printf("gan: %s\n", line.c_str());
			})
{
	if (o_.batch % g_opt_.workers() != 0)
		throw tower::AgreedError(fmt::format("--batch {} does not split evenly over {} workers; use a multiple "
						     "of {}", o_.batch, g_opt_.workers(), g_opt_.workers()));
	per_worker_ = o_.batch / g_opt_.workers();
	if (g_opt_.is_worker())
		sampler_.emplace(data_.count, per_worker_, g_opt_.worker_index(), g_opt_.workers(), o_.seed);
}

double Training::generator_step(int64_t step)
{
	// loss_G = mean softplus(-D(G(z))), the non-saturating logistic loss; its gradient goes
	// through D (whose own gradients this pass overwrites and nobody reports) into G.
	if (!g_opt_.is_worker()) {
		g_opt_.step(o_.lr);
		return 0;
	}
	g_opt_.begin_step();
	const Tensor z = latents(o_.seed, stream(step, for_g), g_opt_.worker_index() * per_worker_, per_worker_);
	const std::vector<float> logits = d_.forward(g_.forward(z));
	const float scale = g_opt_.loss_scale();
	std::vector<float> d_logits(logits.size());
	double loss = 0;
	for (size_t i = 0; i < logits.size(); ++i) {
		loss += gan::softplus(-logits[i]) / static_cast<double>(per_worker_);
		d_logits[i] = static_cast<float>(-gan::sigmoid(-logits[i]) / static_cast<double>(per_worker_) * scale);
	}
	tower::BackwardOptions through_d;
	through_d.loss_scale = scale;
	const Tensor& d_images = d_.backward(d_logits, through_d, {}, true);
	const tower::BackwardPass pass = g_opt_.backward_pass();
	g_.backward(d_images, pass.options, pass.on_ready);
	skipped_ += g_opt_.step(o_.lr).skipped ? 1 : 0;
	return loss;
}

double Training::discriminator_step(int64_t step, std::span<const int64_t> real)
{
	// loss_D = mean softplus(D(G(z))) + mean softplus(-D(x)), fakes and reals in one batch.
	if (!d_opt_.is_worker()) {
		d_opt_.step(d_lr());
		return 0;
	}
	d_opt_.begin_step();
	const Tensor z = latents(o_.seed, stream(step, for_d), d_opt_.worker_index() * per_worker_, per_worker_);
	const Tensor fake = g_.forward(z);
	const std::vector<float> logits = d_.forward(real_images(data_, real, &fake));
	const float scale = d_opt_.loss_scale();
	std::vector<float> d_logits(logits.size());
	double loss = 0;
	for (size_t i = 0; i < logits.size(); ++i) {
		const bool is_fake = static_cast<int64_t>(i) < per_worker_;
		const double l = is_fake ? logits[i] : -logits[i];
		loss += gan::softplus(l) / static_cast<double>(per_worker_);
		const double d = gan::sigmoid(l) * (is_fake ? 1.0 : -1.0);
		d_logits[i] = static_cast<float>(d / static_cast<double>(per_worker_) * scale);
	}
	const tower::BackwardPass pass = d_opt_.backward_pass();
	d_.backward(d_logits, pass.options, pass.on_ready, false);
	skipped_ += d_opt_.step(d_lr()).skipped ? 1 : 0;
	return loss;
}

double Training::r1_step(std::span<const int64_t> real)
{
	// Lazy R1: every r1_every steps, weighted by r1_every, through the optimizer that shares D's
	// state (the seed's D_reg with share=D_opt) and scales its loss on its own.
	if (!d_reg_opt_.is_worker()) {
		d_reg_opt_.step(d_lr());
		return 0;
	}
	d_reg_opt_.begin_step();
	d_.forward(real_images(data_, real, nullptr));
	const tower::BackwardPass pass = d_reg_opt_.backward_pass();
	const double penalty = d_.r1(o_.r1_weight * static_cast<double>(o_.r1_every), pass.options.loss_scale,
				     pass.options, pass.on_ready);
	skipped_ += d_reg_opt_.step(d_lr()).skipped ? 1 : 0;
	return penalty / static_cast<double>(o_.r1_every);
}

void Training::log(int64_t step, double elapsed_s)
{
	const double workers = g_opt_.workers();
	const double steps = static_cast<double>(std::max<int64_t>(logged_steps_, 1));
	const double g = sum_over_ranks(loss_g_) / workers / steps, d = sum_over_ranks(loss_d_) / workers / steps;
	const double r1 = r1_steps_ ? sum_over_ranks(r1_) / workers / static_cast<double>(r1_steps_) : 0.0;
	nlohmann::json line = {{"event", "step"},
			       {"step", step},
			       {"loss_G", g},
			       {"loss_D", d},
			       {"r1", r1},
			       {"loss_scale_log2_G", g_opt_.loss_scaler().log2_scale()},
			       {"loss_scale_log2_D", d_opt_.loss_scaler().log2_scale()},
			       {"loss_scale_log2_D_reg", d_reg_opt_.loss_scaler().log2_scale()},
			       {"samples_per_s", static_cast<double>(logged_steps_ * o_.batch) / std::max(elapsed_s, 1e-9)}};
	metrics_.write(line);
	if (topology_.rank() == 0)
		std::printf("gan: step %lld  loss_G %.5f  loss_D %.5f  r1 %.4f  scales 2^%.2f 2^%.2f 2^%.2f\n",
			    static_cast<long long>(step), g, d, r1, line["loss_scale_log2_G"].get<double>(),
			    line["loss_scale_log2_D"].get<double>(), line["loss_scale_log2_D_reg"].get<double>());
	loss_g_ = loss_d_ = r1_ = 0;
	logged_steps_ = r1_steps_ = 0;
}

void Training::write_picture()
{
	// Fixed latents: the same 64 samples at every run, so pictures of two runs compare.
	if (g_opt_.worker_index() != 0)
		return;
	const Tensor z = latents(o_.seed, stream(0, for_picture), 0, 64);
	const Tensor& images = g_.forward(z);
	int width = 0, height = 0;
	const auto pixels = gan::tile(images.to_host_f32(), 64, 8, &width, &height);
	gan::write_gray_png((std::filesystem::path(o_.out) / "samples.png").string(), width, height, pixels);
}

void Training::run()
{
	int64_t first = 0;
	if (const auto p = checkpointer_.restore(o_.batch))
		first = p->step;
	if (topology_.rank() == 0)
		std::printf("gan: %s strategy on %d rank(s), %d worker(s), global batch %lld, %s, steps %lld..%lld\n",
			    o_.strategy.c_str(), topology_.size(), g_opt_.workers(), static_cast<long long>(o_.batch),
			    o_.precision.c_str(), static_cast<long long>(first), static_cast<long long>(o_.steps));
	auto window = std::chrono::steady_clock::now();
	for (int64_t step = first; step < o_.steps; ++step) {
		if (step == o_.reset_at && step > 0) {
			// A new phase, as when the seed grows a resolution: both networks' optimizers start
			// over (D_reg's with D's: it is the same state).
			g_opt_.reset_optimizer_state();
			d_opt_.reset_optimizer_state();
		}
		std::span<const int64_t> real;
		if (sampler_)
			real = sampler_->shard(step / sampler_->steps_per_epoch(), step % sampler_->steps_per_epoch());
		loss_g_ += generator_step(step);
		loss_d_ += discriminator_step(step, real);
		if (step % o_.r1_every == 0) {
			r1_ += r1_step(real);
			++r1_steps_;
		}
		++logged_steps_;
		if ((step + 1) % o_.log_every == 0 || step + 1 == o_.steps) {
			log(step + 1, std::chrono::duration<double>(std::chrono::steady_clock::now() - window).count());
			window = std::chrono::steady_clock::now();
		}
		if (checkpointer_.due(step + 1)) {
			tower::TrainingPosition p;
			p.step = step + 1;
			p.samples_per_update = o_.batch;
			checkpointer_.save(p);
		}
		checkpointer_.poll();
	}
	checkpointer_.wait();
	uint64_t hashes[2] = {g_opt_.check_replicas(), d_opt_.check_replicas()};
	MPI_Allreduce(MPI_IN_PLACE, hashes, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
	write_picture();
	const nlohmann::json summary = {{"event", "summary"},       {"steps", o_.steps},
					{"world_size", topology_.size()}, {"workers", g_opt_.workers()},
					{"strategy", o_.strategy},        {"precision", o_.precision},
					{"global_batch", o_.batch},       {"skipped_steps", sum_over_ranks(skipped_)},
					{"G_hash", fmt::format("{:016x}", hashes[0])},
					{"D_hash", fmt::format("{:016x}", hashes[1])}};
	metrics_.write(summary);
	metrics_.finish();
	if (topology_.rank() == 0)
		std::printf("gan: done, G %016llx D %016llx, samples in %s/samples.png\n",
			    static_cast<unsigned long long>(hashes[0]), static_cast<unsigned long long>(hashes[1]),
			    o_.out.c_str());
}

} // namespace

int main(int argc, char** argv)
{
	tower::World world(&argc, &argv);
	try {
		const Options o = parse(argc, argv);
		if (world.rank() == 0)
			std::filesystem::create_directories(o.out);
		MPI_Barrier(MPI_COMM_WORLD);
		Training(world, o).run();
		return 0;
	} catch (const tower::AgreedError& e) {
		// Every rank saw the same problem: each says so and all leave together.
		std::fprintf(stderr, "[rank %d] error: %s\n", world.rank(), e.what());
		return 2;
	} catch (const std::exception& e) {
		// One rank's problem: the others may be inside a collective, so the job ends here.
		std::fprintf(stderr, "[rank %d] error: %s\n", world.rank(), e.what());
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}
