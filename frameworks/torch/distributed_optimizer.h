// tower's distributed optimizer for libtorch programs: any torch::optim::Optimizer, its gradients
// reduced by tower while backward runs (the C++ twin of tower.torch.DistributedOptimizer).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "base/error.h"
#include "frameworks/torch/gradient_reducer.h"
#include "frameworks/torch/process.h"

namespace tower::torch_adapter {

// A module's parameters that take gradients, with their names, in the module's order: what every
// rank must hold alike.
inline std::vector<std::pair<std::string, at::Tensor>> named_parameters_of(const torch::nn::Module& module)
{
	std::vector<std::pair<std::string, at::Tensor>> named;
	for (const auto& item : module.named_parameters())
		if (item.value().requires_grad())
			named.emplace_back(item.key(), item.value());
	return named;
}

// "" when `optimizer` updates exactly `parameters` (those that take gradients), else what differs.
std::string parameters_mismatch(torch::optim::Optimizer& optimizer,
				const std::vector<std::pair<std::string, at::Tensor>>& parameters);

// The update rule the owners apply for parameter group `index` of `optimizer` under an owner
// strategy: torch's SGD, Adam and AdamW exactly. What it cannot match (another optimizer class,
// dampening, amsgrad) goes to `problem`.
OptimizerConfig owner_rule(torch::optim::Optimizer& optimizer, size_t index, std::string* problem);

// One step, on every rank (after tower::torch_adapter::init()):
//
//   opt.zero_grad();
//   loss.backward();       // buckets start reducing as their gradients become final
//   opt.step();            // waits for them, then applies the wrapped optimizer (or skips, everywhere)
//
// Clip or inspect the reduced gradients between synchronize() and step() (replicated only).
// Under strategy "parameter-server" the wrapped optimizer never steps: each parameter group's
// gradients go to the owners of its slices, who apply the group's rule (owner_rule) with the
// learning rate the group holds at that step, and every rank receives the new values in step().
// Under "async" and "sync-replicas" (ReducerOptions::steps gives the run's length) the ranks do not
// step together: loop `while (opt.more())`; each step() pushes the gradients to the owners, who
// apply them with the learning rate they carry, and fetches the values of the next step. The
// step() that finds the run over brings every rank the final values. Under "local-sgd" each rank
// applies the group's rule to its own gradients and the ranks average how far they moved every
// `sync_every` steps; settle_replicas() at the end leaves every rank the one synced model.
class DistributedOptimizer {
public:
	// Collective: checks that the ranks agree on the options and parameters, gives every rank
	// rank 0's values (or each owner's), and hooks the gradients. `optimizer` must outlive this
	// object and optimize exactly `parameters` (named_parameters_of(module)).
	DistributedOptimizer(torch::optim::Optimizer& optimizer, std::vector<std::pair<std::string, at::Tensor>> parameters,
			     const ReducerOptions& options = {});

	// Zeroes the gradients in place; refused while a backward pass's gradients are being reduced.
	void zero_grad();
	// Collective: waits for every gradient's reduction and checks the result (replicated only).
	ReduceResult synchronize();
	// replicated (collective): synchronize() unless the program did, then the wrapped optimizer's
	// step unless a reduced gradient was inf or NaN (then no rank applies it). parameter-server
	// (collective), async and sync-replicas (not collective): the owners' update of every group.
	// local-sgd: each worker's own update (collective in its warm-up steps and at its syncs).
	// True when applied (every group's).
	bool step();
	// async and sync-replicas: whether the chief granted this rank another step (always true
	// under the lock-step strategies).
	bool more();
	// Collective, under local-sgd (nothing under the other strategies): every rank takes the one
	// synced model now. Call it at the end of training.
	void settle_replicas();
	const ReduceResult& last() const { return last_; }
	torch::optim::Optimizer& wrapped() { return optimizer_; }

private:
	torch::optim::Optimizer& optimizer_;
	// One under replicated; under the other strategies one per parameter group (null for a group
	// with nothing to train).
	std::vector<std::unique_ptr<GradientReducer>> reducers_;
	bool owners_apply_ = false;
	bool detached_ = false; // async or sync-replicas
	ReduceResult last_;
	bool synchronized_ = false;
};

} // namespace tower::torch_adapter
