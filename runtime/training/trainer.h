// The training loop every program shares: data order, schedule, steps through a strategy,
// logging windows, evaluation, replica checks and checkpoints, told to an observer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/sample_set.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "base/device/device.h"
#include "base/mpi/topology.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/observe/training_observer.h"
#include "runtime/safety/run_fingerprint.h"
#include "runtime/tower.h"

namespace tower {

struct TrainerConfig {
	OptimizerConfig optimizer;
	ScheduleConfig schedule;  // total_steps 0: the run's planned steps
	StrategyOptions strategy;
	int epochs = 2;
	int64_t batch = 128;      // samples per worker per micro-batch
	int accumulate = 1;       // micro-batches per update
	int64_t max_steps = 0;    // 0: run every epoch
	uint64_t data_seed = 42;  // the order of the training samples
	int64_t log_every = 50;   // a step line every this many updates
	int eval_every = 1;       // evaluate every this many epochs and at the end; 0: never
	int64_t check_every = 100; // compare the replicas' hashes every this many updates; 0: at the end only
	// Language models: the tokens each sample predicts (a text window's context). Above 0, step
	// lines and the summary add tokens_per_s, and evaluations add the loss in bits per token.
	int64_t tokens_per_sample = 0;
	std::string timeline_path; // Chrome trace of every rank (runtime/observe/timeline.h); empty: none
	CheckpointConfig checkpoint; // docs/checkpoints.md
	// Written into the summary as they are, so a run's log says what ran.
	nlohmann::json labels;
	// The calling program's own options that every rank must share (tower train adds its model
	// options); compared with the rest of the run before its first collective.
	RunFingerprint program_fields;
};

// What a run ended with, the same on every rank. The whole summary (every key of tower train's
// metrics file) goes to the observer's finished().
struct RunResult {
	int64_t steps = 0;                   // updates, skipped ones included
	int64_t skipped_steps = 0;
	double train_s = 0;
	double samples_per_s = 0;
	uint64_t replica_hash = 0;           // the workers' parameters' (check_replicas())
	std::optional<double> test_accuracy; // a classifier's, when the run evaluated
	std::optional<double> test_loss;     // when the run evaluated
	std::string transport;               // how the gradients travelled: "ring all-reduce", ...
};

// The fields of `c` that every rank must share, its optimizer, schedule and strategy included
// (runtime/safety/run_fingerprint.h).
void describe(RunFingerprint& f, const TrainerConfig& c);

// Trains `model` on the samples of `train` (and evaluates on `test` when it holds samples): any
// model of batches of named tensors, the built-in image classifiers among them. Construction is
// collective over the topology's world and builds the tower (the model and its distributed
// optimizer). What the run has to say goes to `observer` on rank 0 (runtime/observe/run_report.h
// prints progress and writes the metrics file; null: nothing is said). The model, the data sets,
// the topology and the observer must outlive the trainer.
class Trainer {
public:
	Trainer(const Topology& topology, const Device& device, Model& model, const SampleSet& train,
		const SampleSet& test, const TrainerConfig& config, TrainingObserver* observer = nullptr);
	~Trainer();
	Trainer(const Trainer&) = delete;
	Trainer& operator=(const Trainer&) = delete;

	// Collective: runs every planned step; rank 0's observer was given the whole summary.
	RunResult run();

	Tower& tower();

private:
	class Run;
	std::unique_ptr<Run> run_;
};

} // namespace tower
