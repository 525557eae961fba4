// The training run behind `tower train`: data, model, builder, the step loop, logs and summary.
#include "cli/train_loop.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

#include "cli/evaluate.h"
#include "cli/progress.h"
#include "models/data/batch_assembler.h"
#include "models/data/sampler.h"
#include "runtime/agree.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/metrics_log.h"
#include "runtime/mpi_check.h"

namespace tower::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t)
{
	return std::chrono::duration<double>(Clock::now() - t).count();
}

// "0,1;2,3" -> {{0, 1}, {2, 3}}; the assignment itself is validated by the all-reduce.
GroupAssignment parse_groups(const std::string& text)
{
	GroupAssignment groups;
	if (text.empty())
		return groups;
	std::stringstream all(text);
	for (std::string group; std::getline(all, group, ';');) {
		groups.emplace_back();
		std::stringstream members(group);
		for (std::string member; std::getline(members, member, ',');) {
			size_t used = 0;
			int rank = -1;
			try {
				rank = std::stoi(member, &used);
			} catch (const std::exception&) {
				used = 0;
			}
			if (used == 0 || used != member.size())
				throw AgreedError(fmt::format("--groups '{}': '{}' is not a rank number; write groups "
							      "as comma-separated ranks separated by ';', e.g. '0,1;2,3'",
							      text, member));
			groups.back().push_back(rank);
		}
	}
	return groups;
}

// "STEP[:RANK]", STEP counted from 1 as the logs count it; RANK defaults to 0.
void parse_injection(const std::string& text, int world_size, ReplicatedOptions* o)
{
	const auto colon = text.find(':');
	long long step = 0, rank = 0;
	size_t used = 0;
	try {
		step = std::stoll(text.substr(0, colon), &used);
		if (used != (colon == std::string::npos ? text.size() : colon))
			used = 0;
		if (used && colon != std::string::npos) {
			const std::string r = text.substr(colon + 1);
			rank = std::stoll(r, &used);
			if (used != r.size())
				used = 0;
		}
	} catch (const std::exception&) {
		used = 0;
	}
	if (!used || step < 1 || rank < 0 || rank >= world_size)
		throw AgreedError(fmt::format("--inject-nonfinite '{}': write STEP[:RANK] with STEP >= 1 and RANK below "
					      "the {} ranks of this job", text, world_size));
	o->inject_nonfinite_step = step - 1;
	o->inject_nonfinite_rank = static_cast<int>(rank);
}

ReplicatedOptions builder_options(const TrainConfig& c, int world_size, const Device& device)
{
	ReplicatedOptions o;
	// auto: NCCL's ring on GPUs; on the CPU the hierarchical mode, whose steps inside a node
	// read the peers' buffers through shared memory.
	o.mode = c.allreduce == "auto" ? (device.is_cuda() ? AllReduceMode::ring : AllReduceMode::hierarchical)
				       : parse_all_reduce_mode(c.allreduce);
	o.reduce = parse_reduce_op(c.reduce);
	if (o.reduce != ReduceOp::mean && o.reduce != ReduceOp::sum)
		throw AgreedError(fmt::format("--reduce {}: gradients are reduced by mean or sum", c.reduce));
	o.fusion_mb = c.fusion_mb;
	o.overlap = c.overlap;
	o.shard_update = c.shard_update;
	o.groups = parse_groups(c.groups);
	o.compress = c.compress == "none" ? DType::f32 : parse_precision(c.compress);
	LossScaleOptions tuning;
	tuning.log2_init = c.loss_scale_init;
	tuning.log2_inc = c.loss_scale_inc;
	tuning.log2_dec = c.loss_scale_dec;
	o.loss_scale = parse_loss_scale(c.loss_scale, tuning);
	if (!c.inject_nonfinite.empty())
		parse_injection(c.inject_nonfinite, world_size, &o);
	return o;
}

// Rank 0 opens the metrics file; a failure there becomes an error on every rank.
MetricsLog open_metrics(const World& world, const std::string& path)
{
	MetricsLog log;
	std::string problem;
	if (world.rank() == 0 && !path.empty()) {
		try {
			log = MetricsLog(path);
		} catch (const Error& e) {
			problem = e.what();
		}
	}
	agree(world.comm(), problem);
	return log;
}

// Sums of one logging window on this rank.
struct Window {
	int64_t steps = 0, skipped = 0, finite_norms = 0;
	double loss = 0, compute_s = 0, allreduce_s = 0, hidden_s = 0, grad_norm = 0;
	Clock::time_point start = Clock::now();
};

// Everything one run needs, built in dependency order.
class TrainingRun {
public:
	TrainingRun(World& world, const TrainConfig& c);
	int run();

private:
	void train_step(int epoch, int64_t step_in_epoch);
	void log_window();
	void evaluate(int epoch);
	void finish();
	int64_t samples_per_step() const { return c_.batch * c_.accumulate * world_.size(); }

	const TrainConfig& c_;
	World& world_;
	Topology topology_;
	Device device_;
	MetricsLog metrics_;
	Dataset train_, test_;
	std::unique_ptr<Model> model_;
	std::unique_ptr<Optimizer> optimizer_;
	ReplicatedBuilder builder_;
	DistributedSampler sampler_;
	BatchAssembler assembler_;
	LrSchedule schedule_;
	Progress progress_;
	int64_t total_steps_ = 0, step_ = 0;
	int epoch_ = 0;
	float lr_ = 0;
	Window window_;
	double train_s_ = 0, compute_s_ = 0, allreduce_s_ = 0;
	int64_t skipped_ = 0;
	size_t peak_memory_ = 0;
	EvalResult last_eval_;
	bool evaluated_ = false;
};

Dataset load_test_set(const World& world, const TrainConfig& c)
{
	return c.eval_every > 0 ? load_fashion_mnist_agreed(world.comm(), c.data_dir, Split::test) : Dataset{};
}

ModelConfig model_config(const TrainConfig& c)
{
	ModelConfig m = c.model;
	m.precision = parse_precision(c.precision);
	return m;
}

// Optimizer steps in one epoch: each consumes `accumulate` of the sampler's micro-batches.
int64_t updates_per_epoch(const TrainConfig& c, int64_t micro_steps_per_epoch)
{
	const int64_t n = micro_steps_per_epoch / c.accumulate;
	if (n < 1)
		throw AgreedError(fmt::format("--accumulate {} needs {} micro-batches per update but an epoch has only {}; "
					      "lower --accumulate or --batch", c.accumulate, c.accumulate, micro_steps_per_epoch));
	return n;
}

int64_t planned_steps(const TrainConfig& c, int64_t micro_steps_per_epoch)
{
	const int64_t all = updates_per_epoch(c, micro_steps_per_epoch) * c.epochs;
	return c.max_steps > 0 ? std::min(all, c.max_steps) : all;
}

ScheduleConfig schedule_for(const TrainConfig& c, int64_t total_steps)
{
	ScheduleConfig s = c.schedule;
	if (s.total_steps == 0)
		s.total_steps = total_steps;
	return s;
}

TrainingRun::TrainingRun(World& world, const TrainConfig& c)
	: c_(c), world_(world), topology_(world.comm(), ranks_per_node_setting(c.ranks_per_node)),
	  device_(assign_device(topology_, probe_gpu_runtime(), parse_device_preference(c.device))),
	  metrics_(open_metrics(world, c.metrics_path)),
	  train_(load_fashion_mnist_agreed(world.comm(), c.data_dir, Split::train)), test_(load_test_set(world, c)),
	  model_(make_model(model_config(c), device_)), optimizer_(make_optimizer(c.optimizer, model_->parameters())),
	  builder_(topology_, device_, *model_, *optimizer_, builder_options(c, world.size(), device_)),
	  sampler_(train_.count, c.batch, world.rank(), world.size(), c.model.seed),
	  assembler_(train_, c.batch, device_),
	  schedule_(make_schedule(schedule_for(c, planned_steps(c, sampler_.steps_per_epoch())))),
	  progress_(world.rank() == 0, stdout_is_terminal()),
	  total_steps_(planned_steps(c, sampler_.steps_per_epoch()))
{
}

void TrainingRun::train_step(int epoch, int64_t update_in_epoch)
{
	lr_ = schedule_.lr(step_);
	const auto start = Clock::now();
	const int64_t first = update_in_epoch * c_.accumulate;
	for (int64_t m = first; m + 1 < first + c_.accumulate; ++m) {
		const Batch& micro = assembler_.assemble(sampler_.shard(epoch, m));
		builder_.accumulate(micro.images, micro.labels);
	}
	const Batch& batch = assembler_.assemble(sampler_.shard(epoch, first + c_.accumulate - 1));
	const StepStats s = builder_.step(batch.images, batch.labels, lr_);
	const double took = seconds_since(start);
	++step_;
	train_s_ += took;
	compute_s_ += s.compute_s;
	allreduce_s_ += s.allreduce_s;
	skipped_ += s.skipped ? 1 : 0;
	window_.steps += 1;
	window_.skipped += s.skipped ? 1 : 0;
	window_.loss += s.forward.loss;
	window_.compute_s += s.compute_s;
	window_.allreduce_s += s.allreduce_s;
	window_.hidden_s += s.allreduce_s * s.hidden_fraction;
	if (std::isfinite(s.grad_norm)) {
		window_.grad_norm += s.grad_norm;
		window_.finite_norms += 1;
	}
	if (step_ % c_.log_every == 0 || step_ == total_steps_)
		log_window();
	if (c_.check_every > 0 && step_ % c_.check_every == 0)
		builder_.check_replicas();
}

void TrainingRun::log_window()
{
	double sums[2] = {window_.loss, static_cast<double>(window_.steps)};
	TOWER_MPI(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, world_.comm()));
	const double loss = sums[0] / sums[1];
	const double elapsed = seconds_since(window_.start);
	const double samples_per_s =
		static_cast<double>(window_.steps * samples_per_step()) / std::max(elapsed, 1e-9);
	const double allreduce_ms = 1e3 * window_.allreduce_s / static_cast<double>(window_.steps);
	const double grad_norm = window_.finite_norms ? window_.grad_norm / static_cast<double>(window_.finite_norms)
						      : std::numeric_limits<double>::quiet_NaN();
	const double overflow_frequency = static_cast<double>(window_.skipped) / static_cast<double>(window_.steps);
	peak_memory_ = std::max(peak_memory_, peak_memory_bytes(device_));
	ProgressState p;
	p.epoch = epoch_ + 1;
	p.epochs = c_.epochs;
	p.step = step_;
	p.steps = total_steps_;
	p.loss = static_cast<float>(loss);
	p.samples_per_s = samples_per_s;
	p.eta_s = train_s_ / static_cast<double>(step_) * static_cast<double>(total_steps_ - step_);
	p.extra = fmt::format("lr {:.4g}  |g| {:.3g}  scale 2^{:.2f}  skipped {}  all-reduce {:.2f} ms/step", lr_,
			      grad_norm, builder_.loss_scaler().log2_scale(), skipped_, allreduce_ms);
	progress_.update(p);
	metrics_.write({{"event", "step"},
			{"step", step_},
			{"epoch", epoch_ + 1},
			{"loss", loss},
			{"lr", lr_},
			{"samples_per_s", samples_per_s},
			{"allreduce_ms", allreduce_ms},
			{"allreduce_bytes", builder_.bytes_moved_per_step()},
			{"compute_ms", 1e3 * window_.compute_s / static_cast<double>(window_.steps)},
			{"hidden_fraction", window_.allreduce_s > 0 ? window_.hidden_s / window_.allreduce_s : 0.0},
			{"grad_norm", std::isfinite(grad_norm) ? nlohmann::json(grad_norm) : nlohmann::json()},
			{"loss_scale_log2", builder_.loss_scaler().log2_scale()},
			{"overflow_frequency", overflow_frequency},
			{"skipped_steps", skipped_},
			{"peak_memory_bytes", peak_memory_}});
	window_ = Window{};
}

void TrainingRun::evaluate(int epoch)
{
	const auto start = Clock::now();
	last_eval_ = evaluate_test_set(builder_, test_, c_.batch, device_, topology_);
	evaluated_ = true;
	progress_.say(fmt::format("epoch {}: test accuracy {:.2f}%  test loss {:.4f}", epoch + 1,
				  100.0 * last_eval_.accuracy, last_eval_.loss));
	metrics_.write({{"event", "eval"},
			{"step", step_},
			{"epoch", epoch + 1},
			{"test_accuracy", last_eval_.accuracy},
			{"test_loss", last_eval_.loss}});
	window_.start += Clock::now() - start; // evaluation time is not training throughput
}

void TrainingRun::finish()
{
	const uint64_t hash = builder_.check_replicas();
	const double samples_per_s = static_cast<double>(step_ * samples_per_step()) / std::max(train_s_, 1e-9);
	peak_memory_ = std::max(peak_memory_, peak_memory_bytes(device_));
	nlohmann::json summary = {
		{"event", "summary"},
		{"model", c_.model.name},
		{"allreduce", all_reduce_mode_name(builder_.mode())},
		{"world_size", world_.size()},
		{"steps", step_},
		{"global_batch", samples_per_step()},
		{"precision", c_.precision},
		{"compress", c_.compress},
		{"accumulate", c_.accumulate},
		{"skipped_steps", skipped_},
		{"loss_scale_log2", builder_.loss_scaler().log2_scale()},
		{"peak_memory_bytes", peak_memory_},
		{"samples_per_s", samples_per_s},
		{"train_s", train_s_},
		{"compute_s", compute_s_},
		{"allreduce_s", allreduce_s_},
		{"allreduce_bytes_per_step", builder_.bytes_moved_per_step()},
		{"buckets", builder_.plan().buckets.size()},
		{"sharded_update", builder_.update_is_sharded()},
		{"replica_hash", fmt::format("{:016x}", hash)},
		{"test_accuracy", evaluated_ ? nlohmann::json(last_eval_.accuracy) : nlohmann::json()},
		{"test_loss", evaluated_ ? nlohmann::json(last_eval_.loss) : nlohmann::json()},
	};
	metrics_.write(summary);
	metrics_.finish();
	progress_.say(fmt::format(
		"done: {} steps ({} skipped) on {} rank(s), {:.0f} samples/s, test accuracy {}, compute {:.1f} s, "
		"all-reduce {:.1f} s ({:.2f} MB in {} bucket(s) per step), replicas identical (hash {:016x})",
		step_, skipped_, world_.size(), samples_per_s,
		evaluated_ ? fmt::format("{:.2f}%", 100.0 * last_eval_.accuracy) : std::string("not measured"),
		compute_s_, allreduce_s_, static_cast<double>(builder_.bytes_moved_per_step()) / 1e6,
		builder_.plan().buckets.size(), hash));
}

int TrainingRun::run()
{
	progress_.say(fmt::format("tower train: {} ({}) on {} rank(s) ({}), global batch {}{}, {} steps, all-reduce {}{}",
				  c_.model.name, c_.precision, world_.size(), device_.name(), samples_per_step(),
				  c_.accumulate > 1 ? fmt::format(" ({} micro-batches)", c_.accumulate) : std::string(),
				  total_steps_, all_reduce_mode_name(builder_.mode()),
				  builder_.update_is_sharded() ? " (update sharded across the node)" : ""));
	for (epoch_ = 0; epoch_ < c_.epochs && step_ < total_steps_; ++epoch_) {
		const int64_t updates = updates_per_epoch(c_, sampler_.steps_per_epoch());
		for (int64_t u = 0; u < updates && step_ < total_steps_; ++u)
			train_step(epoch_, u);
		const bool last = epoch_ + 1 == c_.epochs || step_ == total_steps_;
		if (c_.eval_every > 0 && (last || (epoch_ + 1) % c_.eval_every == 0))
			evaluate(epoch_);
	}
	finish();
	return 0;
}

} // namespace

int run_training(World& world, const TrainConfig& config)
{
	TrainingRun run(world, config);
	return run.run();
}

} // namespace tower::cli
