// The parameter-server strategy: one owner per variable slice, gradients reduced to the owner,
// the optimizer applied once there, and the new values sent back to every worker.
#include "runtime/strategies/parameter_server/parameter_server.h"

#include <algorithm>
#include <cmath>

#include "base/clock.h"
#include "base/error.h"
#include "base/tensor/memory.h"
#include "collectives/broadcast_named.h"
#include "runtime/observe/timeline.h"

namespace tower {

namespace {

void check_options(const StrategyOptions& o)
{
	if (!o.replicated.groups.empty())
		throw AgreedError("--groups: replica subgroups belong to the replicated strategy; the parameter-server "
				  "strategy reduces every worker's gradient to one owner per variable");
	const DType c = o.gradients.compress;
	if (c != DType::f32 && c != DType::f16 && c != DType::bf16)
		throw AgreedError(fmt::format("--compress {}: gradients travel as f32 (none), f16 or bf16", dtype_name(c)));
	if (o.gradients.reduce != ReduceOp::mean && o.gradients.reduce != ReduceOp::sum)
		throw AgreedError("--reduce: the parameter-server strategy reduces gradients by mean or sum");
}

} // namespace

ParameterServerStrategy::ParameterServerStrategy(const Topology& topology, const Device& device, Model& model,
						 const OptimizerConfig& optimizer, const StrategyOptions& options)
	: topology_(topology), rank_(topology.rank()), device_(device), options_(options), model_(&model),
	  core_(topology, model, options), loss_scaler_(options.gradients.loss_scale)
{
	check_options(options_);
	PsShares served;
	served.parameters = core_.parameters();
	served.placement = &core_.placement();
	served.my_owner_index = core_.my_owner();
	served.worker = is_worker();
	served.workers = workers();
	served.compress = options_.gradients.compress;
	transport_ = shm_ps_transport_applies(topology, device, served.compress) ? make_shm_ps_transport(topology, served)
										  : make_mpi_ps_transport(topology, served);
	take_initial_values();
	core_.start_owning(optimizer, options_.ema_decay);
	auto scaler_state = loss_scaler_.state();
	broadcast_named(topology, scaler_state, 0);
	transport_->publish(true);
}

void ParameterServerStrategy::take_initial_values()
{
	// Every rank built the model from the same seed, but the owner's copy is the one that counts:
	// the first publish sends it to every worker.
	for (const VariableSlice& s : core_.placement().slices)
		if (s.owner == core_.my_owner())
			core_.owned.push_back({s.name, transport_->owned_value(s), transport_->owned_gradient(s), Tensor{}});
}

ForwardResult ParameterServerStrategy::accumulate(const Tensor& images, const Tensor& labels)
{
	TOWER_CHECK(is_worker(), "rank {} serves variables only and has no batch to accumulate", rank_);
	ForwardResult result;
	{
		timeline::Span span("forward", "compute");
		result = model_->forward(images, labels);
	}
	BackwardOptions backward;
	backward.accumulate = micro_batches_ > 0;
	backward.loss_scale = loss_scaler_.scale();
	timeline::Span span("backward", "compute");
	model_->backward({}, backward);
	++micro_batches_;
	return result;
}

bool ParameterServerStrategy::injecting() const
{
	return steps() == options_.gradients.inject_nonfinite_step && rank_ == options_.gradients.inject_nonfinite_rank;
}

bool ParameterServerStrategy::finish_owned(float worker_factor, float owner_factor, double* grad_norm)
{
	// Squares of finite f32 values summed in f64 cannot overflow: the global sum is non-finite
	// exactly when some reduced gradient is inf or NaN, and every rank receives the same sum.
	const double squares = transport_->sum_over_ranks(transport_->push(worker_factor, owner_factor, injecting()));
	*grad_norm = std::sqrt(squares);
	return std::isfinite(squares);
}

StepStats ParameterServerStrategy::step(const Tensor& images, const Tensor& labels, float lr)
{
	StepStats stats;
	stats.loss_scale_log2 = loss_scaler_.log2_scale();
	float worker_factor = 1.0f;
	if (is_worker()) {
		const auto start = Clock::now();
		stats.forward = accumulate(images, labels);
		wait_default_stream(device_); // a GPU's kernels, not their launches
		stats.compute_s = seconds(Clock::now() - start);
		stats.micro_batches = micro_batches_;
		// The micro-batches' sum becomes their mean before it leaves the worker.
		worker_factor = 1.0f / static_cast<float>(micro_batches_);
	}

	const auto comm_start = Clock::now();
	const float divisor = options_.gradients.reduce == ReduceOp::mean ? static_cast<float>(workers()) : 1.0f;
	stats.skipped = !finish_owned(worker_factor, 1.0f / (divisor * loss_scaler_.scale()), &stats.grad_norm);
	{
		timeline::Span span("apply", "update");
		if (!stats.skipped && core_.optimizer())
			core_.optimizer()->step(core_.owned_pointers(), lr);
		if (!stats.skipped && core_.averages())
			core_.averages()->update();
	}
	if (!stats.skipped)
		transport_->publish(false);
	stats.allreduce_s = seconds(Clock::now() - comm_start);
	stats.allreduce_bytes = transport_->moved_bytes();
	loss_scaler_.update(stats.skipped);
	micro_batches_ = 0;
	++steps();
	return stats;
}

ForwardResult ParameterServerStrategy::evaluate(const Tensor& images, const Tensor& labels)
{
	TOWER_CHECK(is_worker(), "rank {} serves variables only and holds no model to evaluate", rank_);
	return model_->forward(images, labels);
}

void ParameterServerStrategy::use_averages(bool averaged)
{
	TOWER_CHECK(has_averages(), "use_averages({}) without --ema-decay: no averages are kept", averaged);
	transport_->settle();
	core_.averages()->swap_in(averaged);
	transport_->publish(true);
}

std::vector<NamedTensor> ParameterServerStrategy::variables()
{
	return core_.variables(loss_scaler_);
}

void ParameterServerStrategy::variables_restored()
{
	// Every owner read its share; rank 0 (always an owner) hands the loss scale and the step
	// counter to the pure workers, and the owners send their values to every worker's model.
	auto shared = loss_scaler_.state();
	shared.push_back({std::string(step_counter_name), core_.step_counter()});
	broadcast_named(topology_, shared, 0);
	transport_->publish(true);
}

uint64_t ParameterServerStrategy::check_replicas() const
{
	return core_.check_replicas();
}

StrategyFacts ParameterServerStrategy::facts() const
{
	StrategyFacts f = core_.facts("parameter-server");
	f.transport = transport_->name();
	f.moved_bytes_per_step = transport_->moved_bytes();
	if (is_worker()) {
		size_t model = 0;
		for (const Parameter* p : core_.parameters())
			model += p->value.bytes();
		f.details["worker_copy_bytes"] = model;
	}
	const Placement& placement = core_.placement();
	f.layout = fmt::format("variables placed on the least-loaded owner by bytes (slices of at most {} elements):\n{}",
			       placement.max_slice, placement.describe());
	if (f.layout.back() == '\n')
		f.layout.pop_back();
	return f;
}

} // namespace tower
