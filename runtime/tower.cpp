// One tower: this rank's replica of a Model, trained through a distributed optimizer over its parameters.
#include "runtime/tower.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/tensor/memory.h"
#include "runtime/observe/timeline.h"

namespace tower {

namespace {

DistributedOptimizerSettings with_precision(DistributedOptimizerSettings settings, const Model& model)
{
	settings.compute_type = model.precision();
	return settings;
}

} // namespace

Tower::Tower(const Topology& topology, const Device& device, Model& model, const OptimizerConfig& optimizer,
	     const StrategyOptions& options, const DistributedOptimizerSettings& settings)
	: device_(device), model_(model),
	  optimizer_(topology, device, model.parameters(), optimizer, options, with_precision(settings, model))
{
}

ForwardResult Tower::forward(const Batch& batch)
{
	timeline::Span span("forward", "compute");
	return model_.forward(batch);
}

void Tower::backward(bool last)
{
	const BackwardPass pass = optimizer_.backward_pass(last);
	timeline::Span span("backward", "compute");
	model_.backward(pass.on_ready, pass.options);
}

ForwardResult Tower::accumulate(const Batch& batch)
{
	TOWER_CHECK(is_worker(), "this rank serves variables only and has no batch to accumulate");
	const ForwardResult result = forward(batch);
	backward(false);
	return result;
}

StepStats Tower::step(const Batch& batch, float lr)
{
	TOWER_CHECK(detached() == nullptr, "Tower::step() is for the lock-step strategies; `strategy` {} trains with "
		    "work() between start() and finish()", facts().name);
	if (!is_worker())
		return optimizer_.step(lr);
	const auto start = SteadyClock::now();
	const ForwardResult result = forward(batch);
	backward(true);
	// On a GPU backward returns once its kernels are queued: wait for them, so compute_s counts
	// the kernels rather than their launches.
	wait_thread_stream(device_);
	const double compute_s = seconds_since(start);
	StepStats stats = optimizer_.step(lr);
	stats.forward = result;
	stats.compute_s = compute_s;
	return stats;
}

bool Tower::work(const Batch& batch, StepStats* stats)
{
	*stats = StepStats{};
	if (!optimizer_.begin_step())
		return false;
	const auto start = SteadyClock::now();
	const ForwardResult result = forward(batch);
	backward(true);
	const double compute_s = seconds_since(start);
	*stats = optimizer_.step(0.0f, {batch.samples(), static_cast<double>(result.loss)});
	stats->forward = result;
	stats->compute_s = compute_s;
	return true;
}

ForwardResult Tower::evaluate(const Batch& batch)
{
	TOWER_CHECK(is_worker(), "this rank serves variables only and holds no model to evaluate");
	return model_.forward(batch);
}

} // namespace tower
