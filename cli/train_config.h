// Everything `tower train` was asked to do, as parsed from its command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/model_factory.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace tower::cli {

struct TrainConfig {
	ModelConfig model;
	OptimizerConfig optimizer;
	ScheduleConfig schedule;
	std::string data_dir;
	int epochs = 2;
	int64_t batch = 128; // per rank
	int64_t max_steps = 0; // 0: run all epochs
	std::string allreduce = "auto"; // ring, hierarchical, naive, or auto (by device)
	std::string reduce = "mean";
	std::string groups; // "0,1;2,3"
	double fusion_mb = 25.0;
	bool overlap = true;
	bool shard_update = true;
	std::string device = "auto";
	std::optional<int> threads; // CPU kernel threads per rank (default 1, or OMP_NUM_THREADS)
	std::optional<int> ranks_per_node;
	std::string metrics_path;
	std::string timeline_path;
	int64_t check_every = 100;
	int64_t log_every = 50;
	int eval_every = 1; // evaluate on the test set every this many epochs and at the end; 0: never
	std::string precision = "fp32";
	std::string compress = "none";
	std::string loss_scale = "none";
	double loss_scale_init = 64.0, loss_scale_inc = 0.0005, loss_scale_dec = 1.0; // log2 policy
	int accumulate = 1;
	std::string inject_nonfinite; // "STEP[:RANK]"
	std::string strategy = "replicated";
	int ps_ranks = 0;
	std::optional<double> ema_decay;
	bool deterministic = false; // sum the all-reduce in rank order
	std::string checkpoint_dir;
	int64_t checkpoint_every = 0;
	int keep_checkpoints = 3;
	bool resume = false;
	std::string resume_path; // empty with resume: the latest valid checkpoint in checkpoint_dir
	std::optional<int> replicas_to_aggregate; // sync-replicas; unset: one per worker
	std::optional<bool> async_scale;          // async; unset: true
	std::optional<std::string> async_staleness; // async: none or scale; unset: none
	std::optional<std::string> max_staleness;   // async: S >= 0 or none; unset: none
	std::string inject_delay;                 // "RANK:MS"
	// Run safety: the stall watchdog's limits (seconds; abort 0: never) and collective fingerprints.
	double stall_warn = 60, stall_abort = 600;
	bool debug_collectives = false;
	// Replicated-only options given on the command line, so another strategy can refuse them.
	std::vector<std::string> replicated_only_given;
};

} // namespace tower::cli
