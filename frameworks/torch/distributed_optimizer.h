// tower's distributed optimizer for libtorch programs: any torch::optim::Optimizer, its gradients
// reduced by tower while backward runs (the C++ twin of tower.torch.DistributedOptimizer).
#pragma once

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
inline std::string parameters_mismatch(torch::optim::Optimizer& optimizer,
				       const std::vector<std::pair<std::string, at::Tensor>>& parameters)
{
	size_t optimized = 0;
	for (auto& group : optimizer.param_groups())
		for (const at::Tensor& p : group.params()) {
			if (!p.requires_grad())
				continue;
			++optimized;
			bool found = false;
			for (const auto& named : parameters)
				found = found || named.second.is_same(p);
			if (!found)
				return "the optimizer updates a parameter that is not among the named parameters: every "
				       "parameter it updates must be reduced";
		}
	return optimized == parameters.size() ? ""
					      : "named parameters that the optimizer does not update: pass the ones it does";
}

// One step, on every rank (after tower::torch_adapter::init()):
//
//   opt.zero_grad();
//   loss.backward();       // buckets start reducing as their gradients become final
//   opt.step();            // waits for them, then applies the wrapped optimizer (or skips, everywhere)
//
// Clip or inspect the reduced gradients between synchronize() and step().
class DistributedOptimizer {
public:
	// Collective: checks that the ranks agree on the options and parameters, gives every rank
	// rank 0's values, and hooks the gradients. `optimizer` must outlive this object and optimize
	// exactly `parameters` (named_parameters_of(module)).
	DistributedOptimizer(torch::optim::Optimizer& optimizer, std::vector<std::pair<std::string, at::Tensor>> parameters,
			     const ReducerOptions& options = {})
		: optimizer_(optimizer), reducer_(parameters, with_problem(options, parameters_mismatch(optimizer, parameters)))
	{
	}

	// Zeroes the gradients in place; refused while a backward pass's gradients are being reduced.
	void zero_grad()
	{
		if (reducer_.gradients_pending())
			throw Error("zero_grad() after backward() but before step() or synchronize(): the gradients are "
				    "being reduced; call step() first");
		optimizer_.zero_grad();
	}
	// Collective: waits for every gradient's reduction and checks the result.
	ReduceResult synchronize()
	{
		last_ = reducer_.synchronize();
		synchronized_ = true;
		return last_;
	}
	// Collective: synchronize() unless the program did, then the wrapped optimizer's step unless a
	// reduced gradient was inf or NaN (then no rank applies it). True when applied.
	bool step()
	{
		if (!synchronized_)
			synchronize();
		synchronized_ = false;
		if (last_.skipped)
			return false;
		optimizer_.step();
		return true;
	}
	const ReduceResult& last() const { return last_; }
	torch::optim::Optimizer& wrapped() { return optimizer_; }

private:
	static ReducerOptions with_problem(ReducerOptions options, const std::string& problem)
	{
		if (options.problem.empty())
			options.problem = problem;
		return options;
	}

	torch::optim::Optimizer& optimizer_;
	GradientReducer reducer_;
	ReduceResult last_;
	bool synchronized_ = false;
};

} // namespace tower::torch_adapter
