// The trainer: a run built in dependency order, what its two loops share (the plan said at the
// start, checkpoints, resume, evaluation), and the choice between them.
#include "runtime/training/run.h"

#include <algorithm>

#include "base/error.h"
#include "base/tensor/memory.h"
#include "base/watchdog/watched_wait.h"
#include "models/kernels/ops.h"
#include "runtime/options/run_fields.h"

namespace tower {

namespace {

using Clock = SteadyClock;

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

} // namespace

int64_t updates_per_epoch(const TrainerConfig& c, int64_t micro_steps_per_epoch)
{
	const int64_t n = micro_steps_per_epoch / c.accumulate;
	if (n < 1)
		throw AgreedError(fmt::format("`accumulate` {} needs {} micro-batches per update but an epoch has only {}; "
					      "lower `accumulate` or `batch`", c.accumulate, c.accumulate, micro_steps_per_epoch));
	return n;
}

Trainer::Run::Run(const Topology& topology, const Device& device, Model& model, const SampleSet& train,
		  const SampleSet& test, const TrainerConfig& c, TrainingObserver* observer)
	: c_(c), topology_(topology), device_(device), agreed_(check_trainer_agreement(topology, device, model, train, test, c)),
	  observer_(topology.rank() == 0 ? observer : nullptr),
	  timeline_(topology.world(), c.timeline_path),
	  test_(test),
	  tower_(std::make_unique<Tower>(topology, device, model, c.optimizer, c.strategy, unchecked())),
	  facts_(tower_->optimizer().strategy().describe()),
	  sampler_(train.size(), c.batch, std::max(tower_->worker_index(), 0), tower_->workers(), c.data_seed),
	  batcher_(train, c.batch, device), total_steps_(planned_steps(c, sampler_.steps_per_epoch())),
	  schedule_(make_schedule(schedule_for(c, total_steps_))),
	  checkpointer_(topology, c.checkpoint, {&tower_->optimizer()}, facts_.name, [this](const std::string& line) { say(line); })
{
	// Rank 0 saves one replica; replica groups each hold their own.
	if ((checkpointer_.saving() || c.checkpoint.resume) && !c.strategy.replicated.groups.empty())
		throw AgreedError("`groups`: each replica group holds its own parameters and a checkpoint saves rank 0's "
				  "replica only; drop `groups` or the checkpoint options");
}

nlohmann::json Trainer::Run::run()
{
	announce();
	if (DetachedRun* detached = tower_->detached())
		return run_detached(*detached);
	return run_lockstep();
}

void Trainer::Run::announce()
{
	say(fmt::format("training: {} strategy on {} rank(s) ({} worker(s), {}), global batch {}{}, {} steps, {}{}",
			facts_.name, topology_.size(), tower_->workers(), device_.name(), samples_per_step(),
			c_.accumulate > 1 ? fmt::format(" ({} micro-batches)", c_.accumulate) : std::string(), total_steps_,
			facts_.transport, facts_.update_is_sharded ? " (update sharded across the node)" : ""));
	if (!facts_.layout.empty())
		say(facts_.layout);
	announce_widened_products();
	if (facts_.name == "replicated" && c_.strategy.replicated.shard_update && device_.is_cuda())
		say("`shard_update`: not on GPUs; each GPU keeps and updates a whole copy (the sharded update "
		    "splits it over a node's CPU ranks through shared memory)");
	if (facts_.details.contains("placement"))
		write({{"event", "placement"}, {"placement", facts_.details["placement"]}});
}

// A 16-bit run on a CPU without matrix kernels for its type computes every product in f32 on
// widened copies: it pays the casts and gains no faster products, so it is slower than fp32 there
// (docs/transformer.md, "bf16 on a CPU without bf16 instructions"). Said once, by rank 0.
void Trainer::Run::announce_widened_products() const
{
	const DType type = tower_->model().precision();
	std::string why;
	try {
		why = ops_for(device_).why_products_widen(type);
	} catch (const std::exception&) {
		return; // only a note: the run's own products say what is wrong, on every rank
	}
	if (why.empty())
		return;
	const std::string name = precision_text(type);
	say(fmt::format("{}: {}; each product widens its operands to f32 and computes in f32, so {} trains slower "
			"than fp32 here (`precision` fp32 is the faster choice on this machine)",
			name, why, name));
}

void Trainer::Run::say(const std::string& line) const
{
	if (observer_ != nullptr)
		observer_->said(line);
}

void Trainer::Run::write(const nlohmann::json& line) const
{
	if (observer_ != nullptr)
		observer_->recorded(line);
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
	p.totals = {{"train_s", train_s_},
		    {"compute_s", compute_s_},
		    {"allreduce_s", allreduce_s_},
		    {"checkpoint_pause_s", checkpoint_s_},
		    {"checkpoints", static_cast<double>(checkpoints_)}};
	const double took = checkpointer_.save(p);
	saved_step_ = step_;
	checkpoint_s_ += took;
	++checkpoints_;
	window_.start += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(took));
	say(fmt::format("checkpoint of step {}: training paused {:.1f} ms, the files are written in the background",
			step_, 1e3 * took));
	write({{"event", "checkpoint"}, {"step", step_}, {"pause_s", took}, {"dir", checkpoint_step_dir(c_.checkpoint.dir, step_)}});
}

void Trainer::Run::resume(int64_t* first_update)
{
	const auto p = checkpointer_.restore(samples_per_step());
	if (observer_ != nullptr)
		observer_->started(p ? p->step : 0, p.has_value());
	if (!p)
		return;
	step_ = p->step;
	// The counters carry on from the checkpoint, so the summary covers the whole run (less the
	// steps a failure lost after it).
	const auto total = [&](const char* key) {
		const auto it = p->totals.find(key);
		return it == p->totals.end() ? 0.0 : it->second;
	};
	train_s_ = total("train_s");
	resumed_train_s_ = train_s_;
	compute_s_ = total("compute_s");
	allreduce_s_ = total("allreduce_s");
	checkpoint_s_ = total("checkpoint_pause_s");
	checkpoints_ = static_cast<int64_t>(total("checkpoints"));
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

void Trainer::Run::evaluate(int epoch)
{
	const auto start = Clock::now();
	timeline::Span span("evaluate", "eval");
	span.arg("epoch", epoch + 1);
	// local-sgd evaluates the model of its last sync, and trains on as if it had not.
	tower_->optimizer().use_synced_values(true);
	last_eval_.raw = evaluate_test_set(*tower_, test_, c_.batch, device_, topology_.world());
	tower_->optimizer().use_synced_values(false);
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
	say(fmt::format("epoch {}: {}{}", epoch + 1, evaluation_text(last_eval_.raw, tokens), averaged_text));
	write(line);
	window_.start += Clock::now() - start; // evaluation time is not training throughput
}

Trainer::Trainer(const Topology& topology, const Device& device, Model& model, const SampleSet& train,
		 const SampleSet& test, const TrainerConfig& config, TrainingObserver* observer)
	: run_(std::make_unique<Run>(topology, device, model, train, test, config, observer))
{
}

Trainer::~Trainer() = default;

RunResult Trainer::run()
{
	const nlohmann::json s = run_->run();
	RunResult r;
	r.steps = s.at("steps").get<int64_t>();
	r.skipped_steps = s.at("skipped_steps").get<int64_t>();
	r.train_s = s.at("train_s").get<double>();
	r.samples_per_s = s.at("samples_per_s").get<double>();
	r.replica_hash = std::stoull(s.at("replica_hash").get<std::string>(), nullptr, 16);
	if (!s.at("test_accuracy").is_null())
		r.test_accuracy = s["test_accuracy"].get<double>();
	if (!s.at("test_loss").is_null())
		r.test_loss = s["test_loss"].get<double>();
	r.transport = s.at("transport").get<std::string>();
	return r;
}

Tower& Trainer::tower()
{
	return run_->tower();
}

} // namespace tower
