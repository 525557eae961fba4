// The parameter-server strategy: one owner per variable slice, gradients reduced to the owner,
// the optimizer applied once there, and the new values sent back to every worker.
#include "runtime/strategies/fault_injection.h"
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
		throw AgreedError("`groups`: replica subgroups belong to the replicated strategy; the parameter-server "
				  "strategy reduces every worker's gradient to one owner per variable");
	const DType c = o.gradients.compress;
	if (c != DType::f32 && c != DType::f16 && c != DType::bf16)
		throw AgreedError(fmt::format("`compress` {}: gradients travel as f32 (none), f16 or bf16", dtype_name(c)));
	if (o.gradients.reduce != ReduceOp::mean && o.gradients.reduce != ReduceOp::sum)
		throw AgreedError("`reduce`: the parameter-server strategy reduces gradients by mean or sum");
}

} // namespace

ParameterServerStrategy::ParameterServerStrategy(const Topology& topology, const Device& device,
						 const ParameterSet& parameters, const OptimizerConfig& optimizer,
						 const StrategyOptions& options)
	: topology_(topology), rank_(topology.rank()), device_(device), options_(options),
	  core_(topology, parameters.parameters, options)
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

bool ParameterServerStrategy::injecting() const
{
	return core_.steps() == faults_of(options_).nonfinite_step && rank_ == faults_of(options_).nonfinite_rank;
}

bool ParameterServerStrategy::finish_owned(float worker_factor, float owner_factor, double* grad_norm)
{
	// Squares of finite f32 values summed in f64 cannot overflow: the global sum is non-finite
	// exactly when some reduced gradient is inf or NaN, and every rank receives the same sum.
	const double squares = transport_->sum_over_ranks(transport_->push(worker_factor, owner_factor, injecting()));
	*grad_norm = std::sqrt(squares);
	return std::isfinite(squares);
}

StepStats ParameterServerStrategy::step(const StepRequest& request)
{
	StepStats stats;
	// The micro-batches' sum becomes their mean before it leaves the worker.
	const float worker_factor = is_worker() ? 1.0f / static_cast<float>(request.micro_batches) : 1.0f;
	stats.micro_batches = request.micro_batches;
	const auto comm_start = Clock::now();
	const float divisor = options_.gradients.reduce == ReduceOp::mean ? static_cast<float>(workers()) : 1.0f;
	stats.skipped = !finish_owned(worker_factor, 1.0f / (divisor * request.loss_scale), &stats.grad_norm);
	{
		timeline::Span span("apply", "update");
		if (!stats.skipped && core_.optimizer())
			core_.optimizer()->step(core_.owned_pointers(), request.lr);
		if (!stats.skipped && core_.averages())
			core_.averages()->update();
	}
	if (!stats.skipped)
		transport_->publish(request.settle);
	stats.allreduce_s = seconds(Clock::now() - comm_start);
	stats.allreduce_bytes = transport_->moved_bytes();
	++core_.steps();
	return stats;
}

void ParameterServerStrategy::use_averages(bool averaged)
{
	TOWER_CHECK(has_averages(), "use_averages({}) without `ema_decay`: no averages are kept", averaged);
	transport_->settle();
	core_.averages()->swap_in(averaged);
	transport_->publish(true);
}

void ParameterServerStrategy::reset_optimizer_state()
{
	// The state lives on the owners only, each over its own slices.
	transport_->settle();
	if (core_.optimizer())
		core_.optimizer()->reset_state();
}

std::vector<NamedTensor> ParameterServerStrategy::variables()
{
	return core_.variables();
}

void ParameterServerStrategy::variables_restored()
{
	// Every owner read its share; rank 0 (always an owner) hands the step counter to the pure
	// workers, and the owners send their values to every worker's parameters.
	std::vector<NamedTensor> shared = {{std::string(step_counter_name), core_.step_counter()}};
	broadcast_named(topology_, shared, 0);
	transport_->publish(true);
}

uint64_t ParameterServerStrategy::check_replicas() const
{
	return core_.check_replicas();
}

StrategyDescription ParameterServerStrategy::describe() const
{
	StrategyDescription f = core_.describe("parameter-server");
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
