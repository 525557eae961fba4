// The training loop every program shares: data order, schedule, steps through a strategy,
// logging, metrics, evaluation, replica checks and checkpoints.
#include "runtime/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "data/sample_batcher.h"
#include "data/sampler.h"
#include "base/mpi/agree.h"
#include "base/error.h"
#include "base/tensor/memory.h"
#include "base/watchdog/collective_debug.h"
#include "base/mpi/mpi_check.h"
#include "runtime/strategies/detached/detached_strategy.h"
#include "base/watchdog/watched_wait.h"
#include "runtime/evaluate.h"
#include "runtime/observe/metrics_log.h"
#include "runtime/observe/progress.h"
#include "runtime/observe/timeline.h"
#include "base/clock.h"
#include "base/mpi/scalars.h"

namespace tower {

namespace {

using Clock = SteadyClock;

// Rank 0 opens the metrics file; a failure there becomes an error on every rank.
MetricsLog open_metrics(MPI_Comm comm, int rank, const std::string& path)
{
	MetricsLog log;
	std::string problem;
	if (rank == 0 && !path.empty()) {
		try {
			log = MetricsLog(path);
		} catch (const Error& e) {
			problem = e.what();
		}
	}
	agree(comm, problem);
	return log;
}

// Every rank runs the same configuration on the same data with the same build: checked before
// the run's first collective, so a difference is an error naming it rather than a hang.
bool check_agreement(const Topology& topology, const Device& device, Model& model, const SampleSet& train,
		     const SampleSet& test, const TrainerConfig& c)
{
	RunFingerprint f;
	describe(f, c);
	describe(f, model, device);
	describe(f, train, "training");
	describe(f, test, "test");
	describe_build(f);
	f.append(c.program_fields);
	check_run_agreement(topology.world(), f);
	return true;
}

// Optimizer steps in one epoch: each consumes `accumulate` of the sampler's micro-batches.
int64_t updates_per_epoch(const TrainerConfig& c, int64_t micro_steps_per_epoch)
{
	const int64_t n = micro_steps_per_epoch / c.accumulate;
	if (n < 1)
		throw AgreedError(fmt::format("--accumulate {} needs {} micro-batches per update but an epoch has only {}; "
					      "lower --accumulate or --batch", c.accumulate, c.accumulate, micro_steps_per_epoch));
	return n;
}

int64_t planned_steps(const TrainerConfig& c, int64_t micro_steps_per_epoch)
{
	const int64_t all = updates_per_epoch(c, micro_steps_per_epoch) * c.epochs;
	return c.max_steps > 0 ? std::min(all, c.max_steps) : all;
}

ScheduleConfig schedule_for(const TrainerConfig& c, int64_t total_steps)
{
	ScheduleConfig s = c.schedule;
	if (s.total_steps == 0)
		s.total_steps = total_steps;
	return s;
}

// The trainer's own agreement check covers the whole run, the optimizer's options included.
DistributedOptimizerSettings unchecked()
{
	DistributedOptimizerSettings s;
	s.check_agreement = false;
	return s;
}

int64_t max_over_ranks(MPI_Comm comm, int64_t value)
{
	return all_reduce_scalar(comm, value, MPI_MAX, "summary totals");
}

int64_t sum_over_ranks(MPI_Comm comm, int64_t value)
{
	return all_reduce_scalar(comm, value, MPI_SUM, "summary totals");
}

// A language model's mean loss (nats per predicted token) in bits per token; for a byte-level
// model, bits per byte.
double bits_per_token(const EvalResult& e)
{
	return e.loss / std::log(2.0);
}

// What a model defines of its evaluation: accuracy for a classifier, perplexity for the others,
// and bits per token for language models.
void add_evaluation(nlohmann::json& line, const EvalResult& e, const std::string& suffix, bool tokens)
{
	line["test_loss" + suffix] = e.loss;
	if (e.classifies)
		line["test_accuracy" + suffix] = e.accuracy;
	else
		line["test_perplexity" + suffix] = e.perplexity();
	if (tokens && !e.classifies)
		line["test_bits_per_token" + suffix] = bits_per_token(e);
}

std::string evaluation_text(const EvalResult& e, bool tokens)
{
	if (e.classifies)
		return fmt::format("test accuracy {:.2f}%  test loss {:.4f}", 100.0 * e.accuracy, e.loss);
	return fmt::format("test loss {:.4f}  perplexity {:.3f}{}", e.loss, e.perplexity(),
			   tokens ? fmt::format("  {:.3f} bits/token", bits_per_token(e)) : std::string());
}

// Sums of one logging window on this rank.
struct Window {
	int64_t updates = 0, worker_steps = 0, skipped = 0, finite_norms = 0;
	double loss = 0, compute_s = 0, allreduce_s = 0, hidden_s = 0, grad_norm = 0;
	Clock::time_point start = Clock::now();
};

struct Evaluation {
	EvalResult raw, averaged;
	bool done = false, has_averaged = false;
};

} // namespace

// Everything one run needs, built in dependency order.
class Trainer::Run {
public:
	Run(const Topology& topology, const Device& device, Model& model, const SampleSet& train, const SampleSet& test,
	    const TrainerConfig& c);
	nlohmann::json run();
	Tower& tower() { return *tower_; }

private:
	void train_step(int epoch, int64_t update_in_epoch);
	const Batch& assemble(int epoch, int64_t micro_step);
	void save_checkpoint();
	void resume(int64_t* first_update);
	// Async and sync-replicas: workers step on their own until the chief's last token; the
	// owners log the windows; evaluation and the summary follow at the end.
	nlohmann::json run_detached(DetachedStrategy& detached);
	void log_detached_window(const nlohmann::json& window);
	void record(const StepStats& s, double took);
	// A line for the elastic launcher (rank 0, under one only).
	void elastic_line(const std::string& what) const;
	void log_window();
	void evaluate(int epoch);
	nlohmann::json finish();
	nlohmann::json strategy_metrics() const;
	int64_t samples_per_step() const { return c_.batch * c_.accumulate * tower_->workers(); }

	TrainerConfig c_;
	const Topology& topology_;
	Device device_;
	bool agreed_; // before anything collective: the ranks run the same configuration
	MetricsLog metrics_;
	timeline::Recording timeline_; // started before the strategy is built: spans there are recorded too
	const SampleSet& test_;
	std::unique_ptr<Tower> tower_;
	StrategyFacts facts_;
	DistributedSampler sampler_;
	SampleBatcher batcher_;
	int64_t total_steps_;
	LrSchedule schedule_;
	Progress progress_;
	Checkpointer checkpointer_;
	int64_t saved_step_ = -1, resumed_step_ = 0;
	int64_t next_epoch_ = 0, next_update_ = 0; // where the next update starts
	double checkpoint_s_ = 0;
	int64_t checkpoints_ = 0;
	int64_t step_ = 0;
	int epoch_ = 0;
	float lr_ = 0;
	Window window_;
	double train_s_ = 0, compute_s_ = 0, allreduce_s_ = 0;
	double resumed_train_s_ = 0; // train_s_ of the checkpoint this run resumed from
	int64_t skipped_ = 0;
	size_t peak_memory_ = 0;
	Evaluation last_eval_;
	nlohmann::json detached_totals_; // async and sync-replicas: the chief's counters
};

Trainer::Run::Run(const Topology& topology, const Device& device, Model& model, const SampleSet& train,
		  const SampleSet& test, const TrainerConfig& c)
	: c_(c), topology_(topology), device_(device), agreed_(check_agreement(topology, device, model, train, test, c)),
	  metrics_(open_metrics(topology.world(), topology.rank(), c.metrics_path)),
	  timeline_(topology.world(), c.timeline_path),
	  test_(test),
	  tower_(std::make_unique<Tower>(topology, device, model, c.optimizer, c.strategy, unchecked())),
	  facts_(tower_->facts()),
	  sampler_(train.size(), c.batch, std::max(tower_->worker_index(), 0), tower_->workers(), c.data_seed),
	  batcher_(train, c.batch, device), total_steps_(planned_steps(c, sampler_.steps_per_epoch())),
	  schedule_(make_schedule(schedule_for(c, total_steps_))),
	  progress_(topology.rank() == 0, stdout_is_terminal()),
	  checkpointer_(topology, c.checkpoint, {&tower_->optimizer()}, facts_.name, [this](const std::string& line) { progress_.say(line); })
{
	// Rank 0 saves one replica; replica groups each hold their own.
	if ((checkpointer_.saving() || c.checkpoint.resume) && !c.strategy.replicated.groups.empty())
		throw AgreedError("--groups: each replica group holds its own parameters and a checkpoint saves rank 0's "
				  "replica only; drop --groups or the checkpoint options");
}

void Trainer::Run::train_step(int epoch, int64_t update_in_epoch)
{
	timeline::Span span("step", "step"); // the whole update, logging and replica checks included
	span.arg("step", step_ + 1);
	lr_ = schedule_.lr(step_);
	set_wait_step(step_);
	const auto start = Clock::now();
	StepStats s;
	if (tower_->is_worker()) {
		const int64_t first = update_in_epoch * c_.accumulate;
		// The update's loss is the mean over all its micro-batches (each one's loss is a mean
		// over equally many samples), and its compute time theirs together.
		double earlier_loss = 0, earlier_compute_s = 0;
		for (int64_t m = first; m + 1 < first + c_.accumulate; ++m) {
			const auto micro_start = Clock::now();
			earlier_loss += tower_->accumulate(assemble(epoch, m)).loss;
			earlier_compute_s += seconds_since(micro_start);
		}
		const Batch& batch = assemble(epoch, first + c_.accumulate - 1);
		// A straggler: lock-step strategies wait for it inside the step.
		if (topology_.rank() == c_.strategy.inject_delay_rank)
			std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(c_.strategy.inject_delay_ms));
		s = tower_->step(batch, lr_);
		if (c_.accumulate > 1) {
			s.forward.loss = static_cast<float>((earlier_loss + s.forward.loss) / c_.accumulate);
			s.compute_s += earlier_compute_s;
		}
	} else {
		s = tower_->step(Batch{}, lr_);
	}
	record(s, seconds_since(start));
	if (step_ % c_.log_every == 0 || step_ == total_steps_) {
		timeline::Span sync("metrics sync", "wait");
		log_window();
	}
	if (c_.check_every > 0 && step_ % c_.check_every == 0) {
		timeline::Span check("check replicas", "wait");
		tower_->check_replicas();
	}
	const bool epoch_done = update_in_epoch + 1 == updates_per_epoch(c_, sampler_.steps_per_epoch());
	next_epoch_ = epoch_done ? epoch + 1 : epoch;
	next_update_ = epoch_done ? 0 : update_in_epoch + 1;
	if (checkpointer_.due(step_))
		save_checkpoint();
	checkpointer_.poll();
}

void Trainer::Run::save_checkpoint()
{
	timeline::Span span("checkpoint", "io"); // the pause only: the files are written in the background
	span.arg("step", step_);
	TrainingPosition p;
	p.step = step_;
	p.epoch = next_epoch_;
	p.update_in_epoch = next_update_;
	p.samples_per_update = samples_per_step();
	p.skipped = skipped_;
	p.train_s = train_s_;
	p.compute_s = compute_s_;
	p.allreduce_s = allreduce_s_;
	p.checkpoint_pause_s = checkpoint_s_;
	p.checkpoints = checkpoints_;
	const double took = checkpointer_.save(p);
	saved_step_ = step_;
	checkpoint_s_ += took;
	++checkpoints_;
	window_.start += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(took));
	progress_.say(fmt::format("checkpoint of step {}: training paused {:.1f} ms, the files are written in the background",
				  step_, 1e3 * took));
	metrics_.write({{"event", "checkpoint"}, {"step", step_}, {"pause_s", took},
			{"dir", checkpoint_step_dir(c_.checkpoint.dir, step_)}});
}

void Trainer::Run::resume(int64_t* first_update)
{
	const auto p = checkpointer_.restore(samples_per_step());
	if (!p) {
		elastic_line("started");
		return;
	}
	elastic_line(fmt::format("resumed {}", p->step));
	step_ = p->step;
	// The counters carry on from the checkpoint, so the summary covers the whole run (less the
	// steps a failure lost after it).
	train_s_ = p->train_s;
	resumed_train_s_ = p->train_s;
	compute_s_ = p->compute_s;
	allreduce_s_ = p->allreduce_s;
	checkpoint_s_ = p->checkpoint_pause_s;
	checkpoints_ = p->checkpoints;
	// A checkpoint of the detached strategies counts its walk in updates of epoch 0, and one of
	// another size may land past an epoch's end: whole epochs first.
	const int64_t per_epoch = updates_per_epoch(c_, sampler_.steps_per_epoch());
	const int64_t epoch = p->epoch + p->update_in_epoch / per_epoch, update = p->update_in_epoch % per_epoch;
	epoch_ = static_cast<int>(epoch);
	*first_update = update;
	next_epoch_ = epoch;
	next_update_ = update;
	skipped_ = p->skipped;
	saved_step_ = step_;
	resumed_step_ = step_;
}

const Batch& Trainer::Run::assemble(int epoch, int64_t micro_step)
{
	timeline::Span span("load batch", "data");
	return batcher_.assemble(sampler_.shard(epoch, micro_step));
}

void Trainer::Run::elastic_line(const std::string& what) const
{
	if (!c_.elastic_lines || topology_.rank() != 0)
		return;
	std::fprintf(stdout, "tower-elastic: %s\n", what.c_str());
	std::fflush(stdout);
}

void Trainer::Run::record(const StepStats& s, double took)
{
	++step_;
	elastic_line(fmt::format("step {}", step_));
	train_s_ += took;
	compute_s_ += s.compute_s;
	allreduce_s_ += s.allreduce_s;
	skipped_ += s.skipped ? 1 : 0;
	// A server has no batch: its steps count for time but not for the loss.
	window_.updates += 1;
	window_.worker_steps += tower_->is_worker() ? 1 : 0;
	window_.skipped += s.skipped ? 1 : 0;
	window_.loss += s.forward.loss;
	window_.compute_s += s.compute_s;
	window_.allreduce_s += s.allreduce_s;
	window_.hidden_s += s.allreduce_s * s.hidden_fraction;
	if (std::isfinite(s.grad_norm)) {
		window_.grad_norm += s.grad_norm;
		window_.finite_norms += 1;
	}
}

nlohmann::json Trainer::Run::strategy_metrics() const
{
	return {{"strategy", facts_.name},
		{"parameter_bytes", facts_.parameter_bytes},
		{"optimizer_state_bytes", facts_.optimizer_state_bytes}};
}

void Trainer::Run::log_window()
{
	double sums[2] = {window_.loss, static_cast<double>(window_.worker_steps)};
	check_collective(topology_.world(), {"loss all-reduce", sizeof sums, DType::f64});
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, topology_.world(), &request));
	wait_request(request, {"loss of the logging window", topology_.world()});
	const double loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
	const double elapsed = seconds_since(window_.start);
	const auto window_steps = static_cast<double>(window_.updates);
	const double samples_per_s = window_steps * static_cast<double>(samples_per_step()) / std::max(elapsed, 1e-9);
	const double allreduce_ms = 1e3 * window_.allreduce_s / window_steps;
	const double grad_norm = window_.finite_norms ? window_.grad_norm / static_cast<double>(window_.finite_norms)
						      : std::numeric_limits<double>::quiet_NaN();
	const double overflow_frequency = static_cast<double>(window_.skipped) / window_steps;
	peak_memory_ = std::max(peak_memory_, peak_memory_bytes(device_));
	ProgressState p;
	p.epoch = epoch_ + 1;
	p.epochs = c_.epochs;
	p.step = step_;
	p.steps = total_steps_;
	p.loss = static_cast<float>(loss);
	p.samples_per_s = samples_per_s;
	p.eta_s = train_s_ / static_cast<double>(std::max<int64_t>(step_ - resumed_step_, 1)) * static_cast<double>(total_steps_ - step_);
	p.extra = fmt::format("lr {:.4g}  |g| {:.3g}  scale 2^{:.2f}  skipped {}  comm {:.2f} ms/step", lr_, grad_norm,
			      tower_->loss_scaler().log2_scale(), skipped_, allreduce_ms);
	progress_.update(p);
	nlohmann::json line = {{"event", "step"},
			       {"step", step_},
			       {"epoch", epoch_ + 1},
			       {"loss", loss},
			       {"lr", lr_},
			       {"samples_per_s", samples_per_s},
			       {"allreduce_ms", allreduce_ms},
			       {"allreduce_bytes", facts_.moved_bytes_per_step},
			       {"compute_ms", 1e3 * window_.compute_s / window_steps},
			       {"hidden_fraction", window_.allreduce_s > 0 ? window_.hidden_s / window_.allreduce_s : 0.0},
			       {"grad_norm", std::isfinite(grad_norm) ? nlohmann::json(grad_norm) : nlohmann::json()},
			       {"loss_scale_log2", tower_->loss_scaler().log2_scale()},
			       {"overflow_frequency", overflow_frequency},
			       {"skipped_steps", skipped_},
			       {"peak_memory_bytes", peak_memory_}};
	if (c_.tokens_per_sample > 0)
		line["tokens_per_s"] = samples_per_s * static_cast<double>(c_.tokens_per_sample);
	line.update(strategy_metrics());
	metrics_.write(line);
	window_ = Window{};
}

void Trainer::Run::evaluate(int epoch)
{
	const auto start = Clock::now();
	timeline::Span span("evaluate", "eval");
	span.arg("epoch", epoch + 1);
	last_eval_.raw = evaluate_test_set(*tower_, test_, c_.batch, device_, topology_.world());
	last_eval_.done = true;
	std::string averaged_text;
	nlohmann::json line = {{"event", "eval"}, {"step", step_}, {"epoch", epoch + 1}};
	const bool tokens = c_.tokens_per_sample > 0;
	add_evaluation(line, last_eval_.raw, "", tokens);
	if (tower_->has_averages()) {
		tower_->use_averages(true);
		last_eval_.averaged = evaluate_test_set(*tower_, test_, c_.batch, device_, topology_.world());
		tower_->use_averages(false);
		last_eval_.has_averaged = true;
		averaged_text = "  averaged " + evaluation_text(last_eval_.averaged, tokens);
		add_evaluation(line, last_eval_.averaged, "_ema", tokens);
	}
	progress_.say(fmt::format("epoch {}: {}{}", epoch + 1, evaluation_text(last_eval_.raw, tokens), averaged_text));
	metrics_.write(line);
	window_.start += Clock::now() - start; // evaluation time is not training throughput
}

nlohmann::json Trainer::Run::finish()
{
	// A dedicated server holds no whole model and reports 0: rank 0 prints the workers' hash.
	const uint64_t hash = all_reduce_scalar(topology_.world(), tower_->check_replicas(), MPI_MAX, "summary: replica hash");
	// Steps before a resume took no time in this run; detached strategies count what was applied.
	const double samples_per_s = detached_totals_.is_null()
		? static_cast<double>((step_ - resumed_step_) * samples_per_step()) / std::max(train_s_ - resumed_train_s_, 1e-9)
		: static_cast<double>(detached_totals_["samples_applied"].get<int64_t>()) /
			  std::max(train_s_ - resumed_train_s_, 1e-9);
	peak_memory_ = std::max(peak_memory_, peak_memory_bytes(device_));
	const auto state_bytes = static_cast<int64_t>(facts_.optimizer_state_bytes);
	nlohmann::json summary = c_.labels;
	summary.update({
		{"event", "summary"},
		{"world_size", topology_.size()},
		{"workers", tower_->workers()},
		{"transport", facts_.transport},
		{"steps", step_},
		{"global_batch", samples_per_step()},
		{"accumulate", c_.accumulate},
		{"skipped_steps", skipped_},
		{"loss_scale_log2", tower_->loss_scaler().log2_scale()},
		{"peak_memory_bytes", peak_memory_},
		{"samples_per_s", samples_per_s},
		{"train_s", train_s_},
		{"compute_s", compute_s_},
		{"allreduce_s", allreduce_s_},
		{"allreduce_bytes_per_step", facts_.moved_bytes_per_step},
		{"gradient_bytes_per_step", facts_.gradient_bytes_per_step},
		{"buckets", facts_.buckets},
		{"sharded_update", facts_.update_is_sharded},
		{"max_optimizer_state_bytes", max_over_ranks(topology_.world(), state_bytes)},
		{"total_optimizer_state_bytes", sum_over_ranks(topology_.world(), state_bytes)},
		{"replica_hash", fmt::format("{:016x}", hash)},
		{"checkpoints", checkpoints_},
		{"checkpoint_pause_s", checkpoint_s_},
		{"test_accuracy", last_eval_.done && last_eval_.raw.classifies ? nlohmann::json(last_eval_.raw.accuracy)
									       : nlohmann::json()},
		{"test_loss", last_eval_.done ? nlohmann::json(last_eval_.raw.loss) : nlohmann::json()},
	});
	if (last_eval_.done && !last_eval_.raw.classifies)
		summary["test_perplexity"] = last_eval_.raw.perplexity();
	if (last_eval_.done && !last_eval_.raw.classifies && c_.tokens_per_sample > 0)
		summary["test_bits_per_token"] = bits_per_token(last_eval_.raw);
	if (c_.tokens_per_sample > 0)
		summary["tokens_per_s"] = samples_per_s * static_cast<double>(c_.tokens_per_sample);
	summary.update(strategy_metrics());
	summary.update(facts_.details);
	if (!detached_totals_.is_null()) {
		summary.update(detached_totals_);
		summary["updates_per_s"] = static_cast<double>(step_) / std::max(train_s_, 1e-9);
	}
	if (!c_.elastic_history.is_null())
		summary["elastic"] = c_.elastic_history;
	if (tower_->has_averages())
		summary["test_accuracy_ema"] = last_eval_.has_averaged && last_eval_.averaged.classifies
						       ? nlohmann::json(last_eval_.averaged.accuracy)
						       : nlohmann::json();
	metrics_.write(summary);
	metrics_.finish();
	timeline_.finish();
	progress_.say(fmt::format(
		"done: {} steps ({} skipped) on {} rank(s), {} strategy, {:.0f} samples/s, {}, compute {:.1f} s, "
		"communication {:.1f} s ({:.2f} MB per step, {}, {} {}(s)), replicas identical (hash {:016x})",
		step_, skipped_, topology_.size(), facts_.name, samples_per_s,
		!last_eval_.done ? std::string("test accuracy not measured")
		: last_eval_.raw.classifies ? fmt::format("test accuracy {:.2f}%", 100.0 * last_eval_.raw.accuracy)
					    : fmt::format("test perplexity {:.3f}", last_eval_.raw.perplexity()),
		compute_s_, allreduce_s_, static_cast<double>(facts_.moved_bytes_per_step) / 1e6, facts_.transport,
		facts_.buckets, facts_.bucket_word, hash));
	return summary;
}

nlohmann::json Trainer::Run::run()
{
	progress_.say(fmt::format("tower train: {} strategy on {} rank(s) ({} worker(s), {}), global batch {}{}, {} steps, {}{}",
				  facts_.name, topology_.size(), tower_->workers(), device_.name(), samples_per_step(),
				  c_.accumulate > 1 ? fmt::format(" ({} micro-batches)", c_.accumulate) : std::string(),
				  total_steps_, facts_.transport,
				  facts_.update_is_sharded ? " (update sharded across the node)" : ""));
	if (!facts_.layout.empty())
		progress_.say(facts_.layout);
	if (facts_.name == "replicated" && c_.strategy.replicated.shard_update && device_.is_cuda())
		progress_.say("--shard-update: not on GPUs; each GPU keeps and updates a whole copy (the sharded update "
			      "splits it over a node's CPU ranks through shared memory)");
	if (facts_.details.contains("placement"))
		metrics_.write({{"event", "placement"}, {"placement", facts_.details["placement"]}});
	if (DetachedStrategy* detached = tower_->detached())
		return run_detached(*detached);
	int64_t first_update = 0;
	resume(&first_update);
	for (; epoch_ < c_.epochs && step_ < total_steps_; ++epoch_) {
		const int64_t updates = updates_per_epoch(c_, sampler_.steps_per_epoch());
		for (int64_t u = first_update; u < updates && step_ < total_steps_; ++u)
			train_step(epoch_, u);
		first_update = 0;
		const bool last = epoch_ + 1 == c_.epochs || step_ == total_steps_;
		if (test_.size() > 0 && c_.eval_every > 0 && (last || (epoch_ + 1) % c_.eval_every == 0))
			evaluate(epoch_);
	}
	if (checkpointer_.saving() && saved_step_ != step_)
		save_checkpoint();
	checkpointer_.wait();
	return finish();
}

nlohmann::json Trainer::Run::run_detached(DetachedStrategy& detached)
{
	if (c_.accumulate != 1)
		throw AgreedError(fmt::format("--accumulate {}: --strategy {} pushes one gradient per token; drop "
					      "--accumulate or use a lock-step strategy", c_.accumulate, facts_.name));
	// A checkpoint's position counts the walk of all workers' batches: update_in_epoch is the
	// updates applied and samples_per_update their batches' samples, so restore() turns it into
	// how far each worker of this run walks in before its first batch.
	int64_t first_update = 0;
	resume(&first_update);
	const int64_t first_walk = epoch_ * sampler_.steps_per_epoch() + first_update;
	if (checkpointer_.saving())
		checkpointer_.forget_after(step_);
	const int64_t samples_per_update = c_.batch * detached.rule().gradients_per_update();
	const auto start = Clock::now();
	DetachedPlan plan;
	plan.planned_steps = total_steps_;
	plan.lr = [this](int64_t planned_step) { return schedule_.lr(planned_step); };
	plan.log_every = c_.log_every;
	plan.on_window = [this](const nlohmann::json& window) { log_detached_window(window); };
	plan.on_applied = [this, samples_per_update, start](int64_t update, bool last) {
		elastic_line(fmt::format("step {}", update));
		if (!checkpointer_.saving() || !(last || checkpointer_.due(update)))
			return;
		TrainingPosition p;
		p.step = update;
		p.update_in_epoch = update;
		p.samples_per_update = samples_per_update;
		p.train_s = resumed_train_s_ + seconds_since(start);
		checkpointer_.save_owner_snapshot(p);
	};
	detached.start(plan);
	if (tower_->is_worker()) {
		// Each worker walks its own shard, epoch after epoch, for as long as the chief grants tokens.
		const int64_t per_epoch = sampler_.steps_per_epoch();
		for (int64_t k = first_walk;; ++k) {
			const Batch& batch = batcher_.assemble(sampler_.shard(k / per_epoch, k % per_epoch));
			StepStats s;
			if (!tower_->work(batch, &s))
				break;
			compute_s_ += s.compute_s;
			allreduce_s_ += s.allreduce_s;
		}
	}
	detached_totals_ = detached.finish();
	if (checkpointer_.saving())
		checkpoints_ = checkpointer_.finish_snapshots();
	train_s_ = resumed_train_s_ + seconds_since(start);
	// The chief's count is the run's (a resumed run that applied none keeps the checkpoint's).
	step_ = std::max(step_, detached_totals_["updates"].get<int64_t>());
	epoch_ = c_.epochs - 1;
	if (test_.size() > 0 && c_.eval_every > 0)
		evaluate(epoch_);
	return finish();
}

void Trainer::Run::log_detached_window(const nlohmann::json& window)
{
	// Runs on rank 0's owner thread while its main thread only trains: nothing else writes
	// the metrics or the progress line until finish().
	const int64_t step = window["step"].get<int64_t>();
	const int64_t planned = std::max<int64_t>(window["updates_planned"].get<int64_t>(), 1);
	ProgressState p;
	p.epoch = 1 + static_cast<int>(std::min<int64_t>(c_.epochs - 1, (step - 1) * c_.epochs / planned));
	p.epochs = c_.epochs;
	p.step = step;
	p.steps = planned;
	p.loss = window["loss"].get<float>();
	p.samples_per_s = window["samples_per_s"].get<double>();
	p.eta_s = 0;
	p.extra = fmt::format("lr {:.4g}  {:.1f} updates/s  {:.2f} gradients/update  dropped {}  staleness {:.2f} (max {})",
			      window["lr"].get<double>(), window["updates_per_s"].get<double>(),
			      window["gradients_per_update"].get<double>(), window["dropped_stale"].get<int64_t>(),
			      window["staleness_mean"].get<double>(), window["staleness_max"].get<int64_t>());
	progress_.update(p);
	nlohmann::json line = window;
	line["event"] = "step";
	line["epoch"] = p.epoch;
	line.update(strategy_metrics());
	metrics_.write(line);
}

Trainer::Trainer(const Topology& topology, const Device& device, Model& model, const SampleSet& train,
		 const SampleSet& test, const TrainerConfig& config)
	: run_(std::make_unique<Run>(topology, device, model, train, test, config))
{
}

Trainer::~Trainer() = default;

nlohmann::json Trainer::run()
{
	return run_->run();
}

Tower& Trainer::tower()
{
	return run_->tower();
}

} // namespace tower
