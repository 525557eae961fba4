// Inside the trainer: the state of one run, shared by the lock-step loop, the detached loop and
// the summary (each in a file of its own). Not installed.
#pragma once

#include <memory>

#include "base/clock.h"
#include "data/sample_batcher.h"
#include "data/sampler.h"
#include "runtime/evaluate.h"
#include "runtime/observe/timeline.h"
#include "runtime/strategies/detached_run.h"
#include "runtime/strategies/strategy.h"
#include "runtime/training/trainer.h"

namespace tower {

// Sums of one logging window on this rank.
struct Window {
	int64_t updates = 0, worker_steps = 0, skipped = 0, finite_norms = 0;
	double loss = 0, compute_s = 0, allreduce_s = 0, hidden_s = 0, grad_norm = 0;
	SteadyClock::time_point start = SteadyClock::now();
};

struct Evaluation {
	EvalResult raw, averaged;
	bool done = false, has_averaged = false;
};

// runtime/training/run_agreement.cpp: collective; every rank's configuration, model, data and
// build compared before the run's first other collective (an AgreedError naming what differs).
bool check_trainer_agreement(const Topology& topology, const Device& device, Model& model, const SampleSet& train,
			     const SampleSet& test, const TrainerConfig& c);

// Optimizer steps in one epoch: each consumes `accumulate` of the sampler's micro-batches.
int64_t updates_per_epoch(const TrainerConfig& c, int64_t micro_steps_per_epoch);

// A language model's mean loss (nats per predicted token) in bits per token.
double bits_per_token(const EvalResult& e);

// An evaluation's metrics (under names ending in `suffix`) and its text for people.
void add_evaluation(nlohmann::json& line, const EvalResult& e, const std::string& suffix, bool tokens);
std::string evaluation_text(const EvalResult& e, bool tokens);

// Everything one run needs, built in dependency order.
class Trainer::Run {
public:
	Run(const Topology& topology, const Device& device, Model& model, const SampleSet& train, const SampleSet& test,
	    const TrainerConfig& c, TrainingObserver* observer);
	nlohmann::json run();
	Tower& tower() { return *tower_; }

private:
	// runtime/training/lockstep_loop.cpp: replicated, parameter-server and local-sgd, every rank in
	// step.
	nlohmann::json run_lockstep();
	void train_step(int epoch, int64_t update_in_epoch);
	const Batch& assemble(int epoch, int64_t micro_step);
	void record(const StepStats& s, double took);
	double window_loss();
	void log_window();
	nlohmann::json window_line(double loss, double samples_per_s, double allreduce_ms, double grad_norm) const;
	// runtime/training/detached_loop.cpp: async and sync-replicas. Workers step on their own
	// until the chief's last token; the owners log the windows; evaluation and the summary
	// follow at the end.
	nlohmann::json run_detached(DetachedRun& detached);
	void log_detached_window(const nlohmann::json& window);
	// runtime/training/run_summary.cpp: the summary and the final tally.
	nlohmann::json finish();
	nlohmann::json summary(uint64_t hash, double samples_per_s);
	std::string tally(uint64_t hash, double samples_per_s) const;
	nlohmann::json strategy_metrics() const;
	// runtime/training/trainer.cpp: what both loops share.
	void announce();
	void announce_widened_products() const;
	void save_checkpoint();
	void resume(int64_t* first_update);
	void evaluate(int epoch);
	// Rank 0 tells the observer; the other ranks' calls do nothing.
	void say(const std::string& line) const;
	void write(const nlohmann::json& line) const;
	int64_t samples_per_step() const { return c_.batch * c_.accumulate * tower_->workers(); }

	TrainerConfig c_;
	const Topology& topology_;
	Device device_;
	bool agreed_; // before anything collective: the ranks run the same configuration
	TrainingObserver* observer_; // rank 0's; null elsewhere
	timeline::Recording timeline_; // started before the strategy is built: spans there are recorded too
	const SampleSet& test_;
	std::unique_ptr<Tower> tower_;
	StrategyDescription facts_;
	DistributedSampler sampler_;
	SampleBatcher batcher_;
	int64_t total_steps_;
	LrSchedule schedule_;
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

} // namespace tower
