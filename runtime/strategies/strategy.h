// The interface every way of training implements and its factory (the options that choose one
// are runtime/strategies/strategy_options.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mpi/topology.h"
#include "base/tensor/named_tensor.h"
#include "optim/optimizer.h"
#include "runtime/strategies/strategy_options.h"

namespace tower {

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
	// parameter-server: return only once every worker holds the new values
	// (DistributedOptimizerSettings::settle_values).
	bool settle = false;
};

// The name every strategy gives its step counter among its variables() (i64 [1], host).
inline constexpr std::string_view step_counter_name = "strategy/global_step";

// What a strategy holds, with the words a summary prints about it.
struct StrategyDescription : StrategyFacts {
	std::string transport;              // "hierarchical all-reduce", "reduce to owners", ...
	std::string bucket_word = "fused bucket"; // what one of the parts the gradient travels in is
	nlohmann::json details;             // strategy-specific: placement, server ranks, ...
	std::string layout;                 // where the variables live, for people; may be empty
};

class DetachedRun;

// How the gradients a program computes become updates of its parameters: one implementation per
// way of training (replicated/, parameter_server/, async/ and sync_replicas/ over detached/, local_sgd/). A strategy sees only parameters
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
	// micro-batch count, checks them for inf and NaN and applies the update, or skips it: on every
	// rank for replicated, parameter-server and local-sgd's warm-up steps and syncs, on this worker
	// alone for a local-sgd inner step (async, sync-replicas: the owner drops the gradient).
	// Collective for replicated, parameter-server and local-sgd's warm-up steps and syncs; a server
	// rank calls it with no backward.
	virtual StepStats step(const StepRequest& request) = 0;

	// Collective. Where the replicas train apart between syncs (local-sgd), takes the sync now so
	// that every rank holds the one synced model (at the end of a run); the other strategies hold
	// it already and do nothing.
	virtual void settle_replicas() {}
	// Where the replicas train apart (local-sgd): true swaps the synced values, the one model of
	// the last sync, into the parameters, false the worker's own back, for an evaluation that
	// leaves the training as it was. Not collective; the others hold one model and do nothing.
	virtual void use_synced_values(bool) {}

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
	// in replicated mode, each owner's under parameter-server, async and sync-replicas, every
	// rank's under local-sgd.
	virtual bool saves_variables() const = 0;
	// Collective, after the saving ranks wrote a checkpoint's values into their variables():
	// brings every other copy (replicas, the workers' parameters) in line.
	virtual void variables_restored() = 0;

	// Collective: the parameters' hash, equal on every rank that must hold the same model, or
	// tower::AgreedError naming the ranks and the first tensor that differ.
	virtual uint64_t check_replicas() const = 0;
	// This strategy's step counter (i64 [1], host): steps taken, skipped ones included.
	virtual int64_t steps() const = 0;

	// What it holds, with the words a summary prints about it; facts() the numbers alone.
	virtual StrategyDescription describe() const = 0;
	StrategyFacts facts() const { return describe(); }
};

// Collective over the topology's world: builds `options.name` over `parameters` (which must
// outlive it) with an optimizer from `optimizer`. Every rank leaves with the same starting
// variables. Bad or inapplicable options throw tower::AgreedError naming them (every rank passes
// the same); DistributedOptimizer checks first that every rank passes the same.
std::unique_ptr<Strategy> make_strategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
					const OptimizerConfig& optimizer, const StrategyOptions& options);

} // namespace tower
