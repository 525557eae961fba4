// The interface every way of training implements, the options that choose one, and its factory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"
#include "collectives/all_reduce.h"
#include "collectives/groups.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "base/tensor/named_tensor.h"
#include "base/mpi/topology.h"

namespace tower {

// How every strategy treats a step's gradients: reduction, compression, loss scaling, and fault
// injection. A strategy refuses the ones it cannot honour, naming the option.
struct GradientOptions {
	ReduceOp reduce = ReduceOp::mean; // mean divides by the replicas of the group
	DType compress = DType::f32;      // f16 or bf16: the gradients travel in that type
	LossScaleOptions loss_scale;      // none by default
	// Fault injection for tests and demos: a NaN in one rank's gradient at this step (0-based).
	int64_t inject_nonfinite_step = -1;
	int inject_nonfinite_rank = 0;
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
	// Run the collective (and, compressed, its casts) even in a replica group of one, where it
	// changes nothing but the compression's rounding. Not a user option: it lets a one-GPU
	// machine drive the NCCL path, compression and overlap ordering that two GPUs would.
	bool reduce_alone = false;
};

// What one training step did on this rank, for the trainer's logs and metrics. A strategy fills
// in the communication and the verdict; whoever ran forward and backward adds its own parts.
struct StepStats {
	ForwardResult forward;        // this rank's loss and correct count (the program's to fill in)
	double compute_s = 0;         // forward and backward on this rank (the program's to fill in)
	double allreduce_s = 0;       // time inside all-reduce calls
	double hidden_fraction = 0;   // the share of all-reduce time that ran during backward
	size_t allreduce_bytes = 0;   // bytes all-reduced this step, in the type they travel in
	bool skipped = false;         // a gradient was inf or NaN: no update (on every rank alike)
	double grad_norm = 0;         // of the reduced, unscaled gradients (inf or NaN when skipped)
	double loss_scale_log2 = 0;   // the scale the step's loss gradient was multiplied by
	int micro_batches = 1;        // backward passes that this update sums
};

// What a strategy trains: the parameters, in the order every rank registers them, and the type
// the program computes in (a node-sharded update keeps 16-bit copies of the weights for it).
struct ParameterSet {
	std::vector<Parameter*> parameters;
	DType compute_type = DType::f32;
};

// What one step() is told by the program that ran its backward passes.
struct StepRequest {
	float lr = 0;
	float loss_scale = 1;   // the loss gradient was multiplied by this
	int micro_batches = 1;  // backward passes whose gradients were summed (0 on a server rank)
	// What the gradients cover on this worker, for the owners' logs of the detached strategies.
	int64_t samples = 0;
	double loss = 0;
};

struct StrategyOptions {
	std::string name = "replicated"; // replicated | parameter-server | async | sync-replicas
	GradientOptions gradients;       // every strategy
	ReplicatedOptions replicated;    // replicated only
	// parameter-server: 0 places the variables on every rank, which also trains; K > 0 makes
	// ranks 0..K-1 servers that only hold variables and apply updates.
	int ps_ranks = 0;
	// Moving averages of the variables after each applied update (every strategy); none when unset.
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
	// Straggler injection (tests, demos, benchmarks): this rank sleeps inject_delay_ms in every
	// step before it sends its gradient; -1: no rank.
	int inject_delay_rank = -1;
	double inject_delay_ms = 0;
};

// The name every strategy gives its step counter among its variables() (i64 [1], host).
inline constexpr std::string_view step_counter_name = "strategy/global_step";

// The names make_strategy knows, for help texts and errors.
std::vector<std::string> strategy_names();

// What a strategy holds on this rank, for the summary and metrics.
struct StrategyFacts {
	std::string name;
	std::string transport;              // "hierarchical all-reduce", "reduce to owners", ...
	size_t parameter_bytes = 0;         // parameter values this rank holds
	size_t optimizer_state_bytes = 0;   // per-element optimizer state this rank holds
	size_t gradient_bytes_per_step = 0; // f32 gradient bytes one step reduces
	size_t moved_bytes_per_step = 0;    // bytes that travel per step, in the transport type
	size_t buckets = 0;                 // parts the gradient travels in: fused buckets, or owners
	std::string bucket_word = "fused bucket"; // what one of those parts is, for people
	bool update_is_sharded = false;     // replicated: the node's replicas split the update
	nlohmann::json details;             // strategy-specific: placement, server ranks, ...
	std::string layout;                 // where the variables live, for people; may be empty
};

class DetachedRun;

// How the gradients a program computes become updates of its parameters: one implementation per
// way of training (replicated/, parameter_server/, async/ and sync_replicas/ over detached/). A strategy sees only parameters
// and their gradients; forward, backward and the loss are the program's (DistributedOptimizer
// is the front most programs use).
class Strategy {
public:
	virtual ~Strategy() = default;

	// Lock-step strategies (nullptr here) take collective step()s the program paces; the
	// detached ones (async, sync-replicas) run their owners between start() and finish()
	// (runtime/strategies/detached_run.h).
	virtual DetachedRun* detached() { return nullptr; }

	// False on a rank that only serves variables: it joins every collective but has no batch.
	virtual bool is_worker() const { return true; }
	// This rank's position among the workers (-1 on a server), and their number.
	virtual int worker_index() const = 0;
	virtual int workers() const = 0;

	// Before a worker's first forward of a step: brings the parameters up to date where they
	// live elsewhere (detached strategies fetch them from the owners). False, without fetching,
	// once a detached run is over. Lock-step strategies have nothing to do.
	virtual bool begin_step() { return true; }
	// Before the backward pass whose gradients the next step() reduces (the last micro-batch's):
	// what the program calls as each parameter's gradient becomes final; empty when the strategy
	// needs no word (it then reduces everything in step()).
	virtual GradReadyFn begin_final_backward() = 0;
	// After the last backward pass: reduces the gradients, divides them by the loss scale and the
	// micro-batch count, checks them for inf and NaN and applies the update, or skips it on every
	// rank. Collective for the lock-step strategies; a server rank calls it with no backward.
	virtual StepStats step(const StepRequest& request) = 0;

	// Collective: whether moving averages are kept, and swapping them into the parameters (true)
	// or the trained weights back (false), for evaluating the averaged model.
	virtual bool has_averages() const = 0;
	virtual void use_averages(bool averaged) = 0;
	// Collective: zeroes the optimizer's state (moments, step count) wherever it lives; the
	// parameters are untouched.
	virtual void reset_optimizer_state() = 0;

	// This rank's share of the training state, by name, sharing memory: parameters, optimizer
	// state, averages and the step counter. What a checkpoint saves. Where the replicated
	// strategy keeps one copy of the parameters and optimizer state per node (its sharded
	// update), the node's ranks share that memory: change the variables on rank 0 only, then
	// call variables_restored() on every rank.
	virtual std::vector<NamedTensor> variables() = 0;
	// Whether this rank's variables() go into a checkpoint and are read back from one: rank 0's
	// in replicated mode, each owner's in parameter-server mode.
	virtual bool saves_variables() const = 0;
	// Collective, after the saving ranks wrote a checkpoint's values into their variables():
	// brings every other copy (replicas, the workers' parameters) in line.
	virtual void variables_restored() = 0;

	// Collective: the parameters' hash, equal on every rank that must hold the same model, or
	// tower::AgreedError naming the ranks and the first tensor that differ.
	virtual uint64_t check_replicas() const = 0;
	// This strategy's step counter (i64 [1], host): steps taken, skipped ones included.
	virtual int64_t steps() const = 0;

	virtual StrategyFacts facts() const = 0;
};

// Collective over the topology's world: builds `options.name` over `parameters` (which must
// outlive it) with an optimizer from `optimizer`. Every rank leaves with the same starting
// variables. Bad or inapplicable options throw tower::AgreedError naming them (every rank passes
// the same); DistributedOptimizer checks first that every rank passes the same.
std::unique_ptr<Strategy> make_strategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
					const OptimizerConfig& optimizer, const StrategyOptions& options);

} // namespace tower
