// The gradient-level API: a distributed optimizer over any parameters whose gradients the program computes itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/device/device.h"
#include "base/mpi/topology.h"
#include "base/tensor/named_tensor.h"
#include "base/tensor/parameter.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "runtime/checkpoint/checkpointed.h"
#include "runtime/strategies/detached_run.h"
#include "runtime/strategies/strategy_options.h"

namespace tower {

class Strategy;

struct DistributedOptimizerSettings {
	// Names this optimizer in errors, logs and checkpoints, where its variables are saved as
	// "<name>/<variable>"; a program's only optimizer may leave it empty (tower train does).
	std::string name;
	// The type the program's layers compute in (f32, f16 or bf16): a node-sharded update keeps
	// copies of the weights in it (Parameter::working).
	DType compute_type = DType::f32;
	// Compare the strategy and optimizer options, the parameters and the build across the ranks
	// before building (tower::AgreedError naming what differs). The trainer turns it off: its own
	// check covers the whole run.
	bool check_agreement = true;
	// parameter-server: step() returns only once every worker holds the new values. Without it
	// the owners' values may still be read by other workers after step() returns, so a program
	// that writes its parameters in place between steps (clamping, renormalising) sets it.
	bool settle_values = false;
};

// What the program runs one backward pass with.
struct BackwardPass {
	BackwardOptions options; // accumulate into the gradients or overwrite them; the loss scale
	// Call with each parameter as soon as its gradient is final (the last pass of a step only;
	// may be empty, when the strategy needs no word): the replicated strategy starts reducing a
	// bucket while backward still computes earlier layers.
	GradReadyFn on_ready;
};

// What the gradients of a step cover on this worker; the detached strategies' owners log it.
struct BatchReport {
	int64_t samples = 0;
	double loss = 0;
};

// The seeds' optimizer wrapper (the StyleGAN2 Optimizer, Horovod's DistributedOptimizer): the
// program owns forward, backward and the loss, and tells this object what it needs to know.
// One step, on every worker:
//
//   if (!opt.begin_step()) break;          // detached strategies: fetch the values first
//   for each micro-batch m of the step:
//       forward(...);
//       BackwardPass pass = opt.backward_pass(/*last=*/m is the last);
//       backward(pass.options, pass.on_ready);  // scale the loss gradient by pass.options.loss_scale
//   StepStats s = opt.step(lr);             // reduce, unscale, check, update or skip everywhere
//
// A rank that only serves variables (--ps-ranks) calls step() alone. The lock-step strategies'
// step() is collective over the topology's world; several optimizers over the same ranks each
// have their own communicators, buckets and threads, and must be stepped in the same order on
// every rank.
class DistributedOptimizer : public Checkpointed {
public:
	// Collective over the topology's world: builds `options.name` over `parameters` (which must
	// outlive it, with their gradients allocated in the values' shape; those may be rebound into
	// fused buckets). Every
	// worker leaves with the same starting values: rank 0's, or each slice's owner's where the
	// strategy places variables on owners.
	DistributedOptimizer(const Topology& topology, const Device& device, std::vector<Parameter*> parameters,
			     const OptimizerConfig& optimizer, const StrategyOptions& options,
			     const DistributedOptimizerSettings& settings = {});
	// Collective: a second optimizer over `shared`'s parameters that shares its optimizer state
	// (the StyleGAN2 seed's share=): a step through either moves the one state. It keeps a loss
	// scale of its own, with the same options. `shared` must outlive it; only one of the two may
	// be inside a step at a time.
	DistributedOptimizer(DistributedOptimizer& shared, const std::string& name);
	~DistributedOptimizer() override;
	DistributedOptimizer(const DistributedOptimizer&) = delete;
	DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

	// Before the step's first forward on a worker: the parameters are current afterwards. False
	// once a detached run is over (the worker then stops). Lock-step strategies have nothing to
	// fetch; for them the first backward_pass() begins the step as well.
	bool begin_step();
	// Before each backward pass of the step; `last` for the pass step() follows.
	BackwardPass backward_pass(bool last = true);
	// After the last backward pass (on a server rank: alone). Returns the step's statistics:
	// forward and compute_s are the program's to fill in.
	StepStats step(float lr, const BatchReport& report = {});

	// The factor the program's loss gradient must be multiplied by now (1 without loss scaling).
	float loss_scale() const { return scaler_.scale(); }
	const LossScaler& loss_scaler() const { return scaler_; }
	// Collective: zeroes the optimizer state (moments, step count) everywhere it lives, shared
	// with the optimizers that share it. The parameters and the loss scale stay.
	void reset_optimizer_state();

	const std::string& name() const override { return settings_.name; }
	const std::vector<Parameter*>& parameters() const override;
	bool is_worker() const;
	int worker_index() const;
	int workers() const;
	bool has_averages() const;
	void use_averages(bool averaged);
	// Collective. Under local-sgd, whose workers train apart between syncs, takes the sync now so
	// that every worker holds the one synced model (call it at the end of training, before its last
	// checkpoint); under the other strategies it does nothing.
	void settle_replicas();
	// Under local-sgd: true puts the synced values (the model of the last sync) into the
	// parameters for an evaluation, false the worker's own back; the training is left as it was.
	// Under the other strategies it does nothing.
	void use_synced_values(bool synced);
	uint64_t check_replicas() const;
	StrategyFacts facts() const;
	// Async and sync-replicas: their start() and finish() around the workers' loop
	// (runtime/strategies/detached_run.h); nullptr under the lock-step strategies.
	DetachedRun* detached();

	// What a checkpoint holds of this optimizer on this rank, named "<name>/..." when it has a
	// name: the strategy's variables (left to the optimizer it shares them with, if any), then
	// the loss-scale state.
	std::vector<NamedTensor> variables() override;
	bool saves_variables() const override;
	// Collective, after a checkpoint's values were written into variables() on the saving ranks.
	void variables_restored() override;

	// The strategy itself (runtime/strategies/strategy.h: tower's own interface, not installed).
	Strategy& strategy() const;

private:
	struct Shared;
	std::vector<NamedTensor> named(std::vector<NamedTensor> variables) const;
	void check_no_other_step() const;
	void enter_step();

	std::shared_ptr<Shared> shared_; // the strategy, and which optimizer is inside a step
	DistributedOptimizerSettings settings_;
	LossScaler scaler_;
	const Topology& topology_;
	bool owns_state_; // false for an optimizer made with share=
	enum class Phase { idle, begun, final_pass } phase_ = Phase::idle;
	int passes_ = 0; // backward passes in the step under way
};

} // namespace tower
