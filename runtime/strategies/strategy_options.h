// What a program chooses a strategy with, and what a strategy reports: the options of every way
// of training, a step's statistics and the facts of what a strategy holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/all_reduce_mode.h"
#include "collectives/groups.h"
#include "collectives/reduce_op.h"
#include "models/model.h"
#include "optim/loss_scale.h"

namespace tower {

struct FaultInjection;

// How every strategy treats a step's gradients: reduction, compression and loss scaling. A
// strategy refuses the ones it cannot honour, naming the option.
struct GradientOptions {
	ReduceOp reduce = ReduceOp::mean; // mean divides by the replicas of the group
	DType compress = DType::f32;      // f16 or bf16: the gradients travel in that type
	LossScaleOptions loss_scale;      // none by default
};

// The replicated strategy's own options: how its fused all-reduce runs.
struct ReplicatedOptions {
	AllReduceMode mode = AllReduceMode::ring;
	double fusion_mb = 25.0;          // bucket threshold; 0 gives one bucket per gradient
	bool overlap = true;              // all-reduce a bucket as soon as its gradients are ready
	GroupAssignment groups;           // empty: all ranks reduce together
	AllReduceOptions all_reduce;
	// Where the replicas share a node's memory (CPU towers, hierarchical mode), split the update
	// across them: see runtime/strategies/replicated/sharded_update.h. The result is the same either way.
	bool shard_update = true;
};

// How local-sgd's outer all-reduce sends the workers' pseudo-gradients.
enum class OuterCompression { none, bf16, int8 };

// The local-sgd strategy's own options (runtime/strategies/local_sgd/local_sgd_strategy.h). The
// defaults are DiLoCo's outer optimizer; H fits tower's runs (docs/slow-links.md says why).
struct LocalSgdOptions {
	int64_t sync_every = 50;                   // H: inner steps of each worker between syncs
	int64_t local_start = 0;                   // replicated steps (gradients averaged) before H applies
	std::string outer_optimizer = "nesterov";  // sgd (rate 1: plain averaging) or nesterov
	float outer_lr = 0.7f;
	float outer_momentum = 0.9f;               // nesterov only
	OuterCompression compress = OuterCompression::none;
	// Each sync's outer all-reduce runs during the next H inner steps, and its outer step is
	// applied at the next sync (one sync late; each worker keeps its own last H steps on top).
	bool overlap = false;
	// Under overlap: the mean is applied this many inner steps after its sync instead (each worker
	// keeps its own steps since that sync on top); 0, or H and more: at the next sync.
	int64_t outer_delay = 0;
};

// What one training step did on this rank, for the trainer's logs and metrics. A strategy fills
// in the communication and the verdict; whoever ran forward and backward adds its own parts.
struct StepStats {
	ForwardResult forward;        // this rank's loss and correct count (the program's to fill in)
	double compute_s = 0;         // forward and backward on this rank (the program's to fill in)
	double allreduce_s = 0;       // time inside all-reduce calls
	double hidden_fraction = 0;   // the share of all-reduce time that ran during backward
	size_t allreduce_bytes = 0;   // bytes all-reduced this step, in the type they travel in
	bool skipped = false;         // a gradient was inf or NaN: no update (every rank alike, except a
				      // local-sgd inner step: that worker alone)
	double grad_norm = 0;         // of the reduced (local-sgd: this worker's own), unscaled gradients
				      // (inf or NaN when skipped)
	double loss_scale_log2 = 0;   // the scale the step's loss gradient was multiplied by
	int micro_batches = 1;        // backward passes that this update sums
};

struct StrategyOptions {
	std::string name = "replicated"; // replicated | parameter-server | async | sync-replicas | local-sgd
	GradientOptions gradients;       // every strategy
	ReplicatedOptions replicated;    // replicated (local-sgd takes its all-reduce's mode and settings)
	LocalSgdOptions local_sgd;       // local-sgd only
	// parameter-server, async, sync-replicas: 0 places the variables on every rank, which also
	// trains; K > 0 makes ranks 0..K-1 servers that only hold variables and apply updates.
	int ps_ranks = 0;
	// Moving averages of the variables after each applied update (every strategy but local-sgd);
	// none when unset.
	std::optional<double> ema_decay;
	// sync-replicas: gradients averaged into one update; 0 means one per worker.
	int replicas_to_aggregate = 0;
	// async: scale every gradient by 1/workers, the mean a synchronous step would take.
	bool async_scale = true;
	// async: scale each gradient down by its staleness as well (runtime/strategies/async/async_rule.h).
	bool async_staleness_scale = false;
	// async: the most updates a gradient may arrive late; workers wait for a token to keep it.
	// -1 (the default): no bound, the seed's async, where no worker ever waits. 1 lets at most two
	// gradients be in flight at once; at 3 workers it brought async to synchronous accuracy but
	// makes every worker pace itself on a straggler (docs/stragglers.md).
	int64_t max_staleness = -1;
	// Faults tower's own tests and demos put in on purpose (not installed:
	// runtime/strategies/fault_injection.h); a program leaves it null.
	std::shared_ptr<const FaultInjection> faults;
};

// The names make_strategy knows, for help texts and errors.
std::vector<std::string> strategy_names();

// What a strategy holds on this rank, for the summary and metrics.
struct StrategyFacts {
	std::string name;
	size_t parameter_bytes = 0;         // parameter values this rank holds
	size_t optimizer_state_bytes = 0;   // per-element optimizer state this rank holds
	size_t gradient_bytes_per_step = 0; // f32 gradient bytes one step reduces
	size_t moved_bytes_per_step = 0;    // bytes that travel per step, in the transport type
	size_t buckets = 0;                 // parts the gradient travels in: fused buckets, or owners
	bool update_is_sharded = false;     // replicated: the node's replicas split the update
};

} // namespace tower
