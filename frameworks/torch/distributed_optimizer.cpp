// tower's distributed optimizer for libtorch programs, and the owners' rules that match torch's.
#include "frameworks/torch/distributed_optimizer.h"

#include <cmath>
#include <typeinfo>

#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace tower::torch_adapter {

namespace {

template <typename Options> void adam_rule(const Options& o, OptimizerConfig& c, std::string* problem)
{
	c.beta1 = static_cast<float>(std::get<0>(o.betas()));
	c.beta2 = static_cast<float>(std::get<1>(o.betas()));
	c.epsilon = static_cast<float>(o.eps());
	c.weight_decay = static_cast<float>(o.weight_decay());
	c.pytorch_adam = true;
	if (o.amsgrad())
		*problem = "amsgrad: the owners' rule matches torch's Adam only without it";
}

// The parameters of `optimizer`'s group `index` among `parameters`, in their order.
std::vector<std::pair<std::string, at::Tensor>> of_group(torch::optim::Optimizer& optimizer, size_t index,
							 const std::vector<std::pair<std::string, at::Tensor>>& parameters)
{
	std::vector<std::pair<std::string, at::Tensor>> out;
	for (const auto& named : parameters)
		for (const at::Tensor& p : optimizer.param_groups()[index].params())
			if (named.second.is_same(p))
				out.push_back(named);
	return out;
}

} // namespace

std::string parameters_mismatch(torch::optim::Optimizer& optimizer,
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

OptimizerConfig owner_rule(torch::optim::Optimizer& optimizer, size_t index, std::string* problem)
{
	OptimizerConfig c;
	const torch::optim::OptimizerOptions& options = optimizer.param_groups()[index].options();
	if (typeid(optimizer) == typeid(torch::optim::SGD)) {
		const auto& o = static_cast<const torch::optim::SGDOptions&>(options);
		c.name = o.momentum() != 0 ? "momentum" : "sgd";
		c.momentum = static_cast<float>(o.momentum());
		c.nesterov = o.nesterov();
		c.weight_decay = static_cast<float>(o.weight_decay());
		if (o.dampening() != 0)
			*problem = fmt::format("dampening {}: the owners' rule matches torch's SGD only with 0", o.dampening());
	} else if (typeid(optimizer) == typeid(torch::optim::Adam)) {
		c.name = "adam";
		adam_rule(static_cast<const torch::optim::AdamOptions&>(options), c, problem);
	} else if (typeid(optimizer) == typeid(torch::optim::AdamW)) {
		c.name = "adamw";
		adam_rule(static_cast<const torch::optim::AdamWOptions&>(options), c, problem);
	} else {
		*problem = "under an owner strategy and local-sgd tower applies the update with torch's SGD, Adam or "
			   "AdamW rule exactly; other optimizers train under replicated";
	}
	if (!problem->empty())
		*problem = fmt::format("param_groups[{}]: {}", index, *problem);
	return c;
}

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
					   std::vector<std::pair<std::string, at::Tensor>> parameters,
					   const ReducerOptions& options)
	: optimizer_(optimizer), owners_apply_(options.strategy.name != "replicated"),
	  detached_(options.strategy.name == "async" || options.strategy.name == "sync-replicas")
{
	ReducerOptions first = options;
	if (first.problem.empty())
		first.problem = parameters_mismatch(optimizer, parameters);
	if (first.problem.empty() && options.strategy.ps_ranks > 0)
		first.problem = "`ps_ranks` above 0 (ranks that only serve) is tower.torch's (its serve()); the libtorch "
				"DistributedOptimizer takes 0, every rank an owner that trains";
	if (!owners_apply_) {
		reducers_.push_back(std::make_unique<GradientReducer>(std::move(parameters), first));
		return;
	}
	// Every group's rule first, so that what one rank cannot match fails every rank at the first
	// reducer, before any rank waits in the next.
	const size_t groups = optimizer.param_groups().size();
	std::vector<OptimizerConfig> rules;
	for (size_t g = 0; g < groups; ++g) {
		std::string problem;
		rules.push_back(owner_rule(optimizer, g, &problem));
		if (first.problem.empty())
			first.problem = problem;
	}
	bool built = false;
	for (size_t g = 0; g < groups; ++g) {
		auto named = of_group(optimizer, g, parameters);
		// A group with nothing to train gets no reducer, unless no group has anything: then the
		// last one's says so, on every rank.
		if (named.empty() && (built || g + 1 < groups)) {
			reducers_.push_back(nullptr);
			continue;
		}
		ReducerOptions o = built ? options : first;
		o.optimizer = rules[g];
		o.name = fmt::format("{}.param_groups[{}]", options.name, g);
		reducers_.push_back(std::make_unique<GradientReducer>(std::move(named), o));
		built = true;
	}
}

void DistributedOptimizer::zero_grad()
{
	for (const auto& r : reducers_)
		if (r && r->gradients_pending())
			throw Error("zero_grad() after backward() but before step() or synchronize(): the gradients are "
				    "being reduced; call step() first");
	optimizer_.zero_grad();
}

ReduceResult DistributedOptimizer::synchronize()
{
	if (owners_apply_)
		throw Error("synchronize() under an owner strategy: the owners apply the update as they receive the "
			    "gradients, so nothing can change them in between; call step()");
	last_ = reducers_.front()->synchronize();
	synchronized_ = true;
	return last_;
}

bool DistributedOptimizer::more()
{
	// Every group's run starts at its first more(): ask each, not only until one says yes.
	bool any = false;
	for (const auto& r : reducers_)
		if (r)
			any = (!r->detached() || r->more()) || any;
	if (!any)
		for (const auto& r : reducers_)
			if (r)
				r->finish_run(); // collective, as after a last step(); idempotent
	return any;
}

void DistributedOptimizer::settle_replicas()
{
	for (const auto& r : reducers_)
		if (r)
			r->settle_replicas();
}

bool DistributedOptimizer::step()
{
	if (owners_apply_) {
		ReduceResult all;
		double squares = 0;
		if (detached_ && !more())
			throw Error("step() after the run ended (its `steps` spent): loop while more() is true");
		for (size_t g = 0; g < reducers_.size(); ++g) {
			// Under async one group's tokens may run out a step before another's.
			if (!reducers_[g] || (detached_ && !reducers_[g]->more()))
				continue;
			const auto lr = static_cast<float>(optimizer_.param_groups()[g].options().get_lr());
			const ReduceResult r = reducers_[g]->synchronize(lr);
			all.skipped = all.skipped || r.skipped;
			squares += r.grad_norm * r.grad_norm;
			all.allreduce_s += r.allreduce_s;
			all.hidden_fraction += r.allreduce_s * r.hidden_fraction; // weighted; divided below
			all.buckets += r.buckets;
		}
		all.grad_norm = std::sqrt(squares);
		all.hidden_fraction = all.allreduce_s > 0 ? all.hidden_fraction / all.allreduce_s : 0.0;
		last_ = all;
		if (detached_ && !more())
			for (const auto& r : reducers_)
				if (r)
					r->finish_run(); // collective: every rank gets the final values
		return !all.skipped;
	}
	if (!synchronized_)
		synchronize();
	synchronized_ = false;
	if (last_.skipped)
		return false;
	optimizer_.step();
	return true;
}

} // namespace tower::torch_adapter
