// The replicated strategy: every rank holds the whole model and optimizer, kept in lock-step by
// the replicated engine's fused all-reduce.
#include "runtime/strategies/fault_injection.h"
#include "runtime/strategies/replicated/replicated_strategy.h"

#include "collectives/broadcast_named.h"
#include "base/error.h"

namespace tower {

namespace {

std::vector<NamedTensor> parameter_values(const std::vector<Parameter*>& parameters)
{
	std::vector<NamedTensor> out;
	for (Parameter* p : parameters)
		out.push_back({p->name, p->value});
	return out;
}

size_t per_element_state_bytes(Optimizer& optimizer)
{
	// The step counter is one scalar per optimizer, not state that grows with the model.
	size_t total = 0;
	for (const NamedTensor& s : optimizer.state())
		if (s.tensor.dtype() == DType::f32)
			total += s.tensor.bytes();
	return total;
}

} // namespace

ReplicatedStrategy::ReplicatedStrategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
				       const OptimizerConfig& optimizer, const StrategyOptions& options)
	: topology_(topology), rank_(topology.rank()), world_size_(topology.size()), parameters_(parameters.parameters),
	  optimizer_(make_optimizer(optimizer, parameters_)),
	  engine_(std::make_unique<ReplicatedEngine>(topology, device, parameters, *optimizer_,
						     ReplicatedEngineOptions{options.gradients, options.replicated, faults_of(options)}))
{
	// The engine has made every replica rank 0's, so the averages start equal everywhere.
	if (options.ema_decay)
		averages_ = std::make_unique<VariableAverages>(*options.ema_decay, parameter_values(parameters_));
}

StepStats ReplicatedStrategy::step(const StepRequest& request)
{
	const StepStats stats = engine_->step(request);
	if (averages_ && !stats.skipped)
		averages_->update();
	return stats;
}

void ReplicatedStrategy::reset_optimizer_state()
{
	// Where the node keeps one copy of the moments, one rank zeroes it for the node; the step
	// counter is every rank's own (each counts the steps it applies to its shard).
	engine_->write_variables([&](bool writes) {
		if (writes)
			optimizer_->reset_parameter_state();
	});
	optimizer_->reset_step_counter();
}

void ReplicatedStrategy::use_averages(bool averaged)
{
	TOWER_CHECK(averages_ != nullptr, "use_averages({}) without `ema_decay`: no averages are kept", averaged);
	// Where the node keeps one copy of the parameters, one rank swaps it for the node.
	engine_->write_variables([&](bool writes) { averages_->swap_in(averaged, writes); });
}

std::vector<NamedTensor> ReplicatedStrategy::variables()
{
	auto out = engine_->variables();
	if (averages_)
		for (auto& s : averages_->state())
			out.push_back(s);
	return out;
}

void ReplicatedStrategy::variables_restored()
{
	// Rank 0 read the checkpoint; every replica takes its values, device and host tensors apart,
	// into a copy of its own (the broadcast writes on every rank).
	engine_->with_own_variables([&] {
		std::vector<NamedTensor> device, host;
		for (auto& v : variables())
			(v.tensor.device().is_cuda() ? device : host).push_back(v);
		broadcast_named(topology_, device, 0);
		broadcast_named(topology_, host, 0);
	});
}

StrategyDescription ReplicatedStrategy::describe() const
{
	StrategyDescription f;
	f.name = "replicated";
	f.transport = std::string(all_reduce_mode_name(engine_->mode())) + " all-reduce";
	// Under a sharded update the node's first rank holds the variables its ranks share.
	if (engine_->holds_variables()) {
		for (const NamedTensor& p : engine_->parameter_tensors())
			f.parameter_bytes += p.tensor.bytes();
		f.optimizer_state_bytes = per_element_state_bytes(*optimizer_);
	}
	f.gradient_bytes_per_step = engine_->bytes_per_step();
	f.moved_bytes_per_step = engine_->bytes_moved_per_step();
	f.buckets = engine_->plan().buckets.size();
	f.update_is_sharded = engine_->update_is_sharded();
	f.details = {{"max_optimizer_state_bytes", f.optimizer_state_bytes}};
	if (averages_)
		f.details["ema_bytes"] = averages_->bytes();
	return f;
}

} // namespace tower
