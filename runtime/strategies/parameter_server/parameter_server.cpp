// The parameter-server strategy: one owner per variable slice, gradients reduced to the owner,
// the optimizer applied once there, and the new values sent back to every worker.
#include "runtime/parameter_server.h"

#include <algorithm>
#include <cmath>

#include "collectives/broadcast_named.h"
#include "collectives/signature_check.h"
#include "runtime/base/error.h"
#include "runtime/base/memory.h"
#include "runtime/base/mpi_check.h"
#include "runtime/replica_check.h"
#include "runtime/timeline.h"

namespace tower {

namespace {

double seconds(std::chrono::steady_clock::duration d)
{
	return std::chrono::duration<double>(d).count();
}

void check_options(const StrategyOptions& o, int world_size)
{
	if (o.ps_ranks < 0 || (o.ps_ranks > 0 && o.ps_ranks >= world_size))
		throw AgreedError(fmt::format("--ps-ranks {}: dedicated server ranks must leave at least one worker "
					      "among the {} rank(s) of this job; use 0 to place the variables on every "
					      "rank, or 1..{} servers with more ranks",
					      o.ps_ranks, world_size, std::max(world_size - 1, 0)));
	if (!o.replicated.groups.empty())
		throw AgreedError("--groups: replica subgroups belong to the replicated strategy; the parameter-server "
				  "strategy reduces every worker's gradient to one owner per variable");
	const DType c = o.replicated.compress;
	if (c != DType::f32 && c != DType::f16 && c != DType::bf16)
		throw AgreedError(fmt::format("--compress {}: gradients travel as f32 (none), f16 or bf16", dtype_name(c)));
	if (o.replicated.reduce != ReduceOp::mean && o.replicated.reduce != ReduceOp::sum)
		throw AgreedError("--reduce: the parameter-server strategy reduces gradients by mean or sum");
}

} // namespace

ParameterServerStrategy::ParameterServerStrategy(const Topology& topology, const Device& device, Model& model,
						 const OptimizerConfig& optimizer, const StrategyOptions& options)
	: topology_(topology), rank_(topology.rank()), device_(device), options_(options), model_(&model),
	  parameters_(model.parameters()), loss_scaler_(options.replicated.loss_scale)
{
	check_options(options_, topology.size());
	std::vector<NamedTensor> gradients;
	for (const Parameter* p : parameters_)
		gradients.push_back({p->name, p->grad});
	check_signatures(topology.world(), gradients, 0, "gradient list");

	const int servers = options_.ps_ranks;
	workers_ = topology.size() - servers;
	worker_index_ = rank_ >= servers ? rank_ - servers : -1;
	std::vector<int> owners;
	for (int r = 0; r < (servers > 0 ? servers : topology.size()); ++r)
		owners.push_back(r);
	std::vector<VariableSize> sizes;
	for (const Parameter* p : parameters_)
		sizes.push_back({p->name, p->value.numel()});
	placement_ = place_variables(sizes, owners);
	const auto mine = std::find(owners.begin(), owners.end(), rank_);
	my_owner_index_ = mine == owners.end() ? -1 : static_cast<int>(mine - owners.begin());
	MPI_Comm workers = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split(topology.world(), is_worker() ? 0 : MPI_UNDEFINED, rank_, &workers));
	worker_comm_ = CommHandle(workers);
	PsShares served;
	served.parameters = parameters_;
	served.placement = &placement_;
	served.my_owner_index = my_owner_index_;
	served.worker = is_worker();
	served.workers = workers_;
	served.compress = options_.replicated.compress;
	transport_ = shm_ps_transport_applies(topology, device, served.compress) ? make_shm_ps_transport(topology, served)
										  : make_mpi_ps_transport(topology, served);
	take_initial_values();
	if (!owned_.empty()) {
		std::vector<Parameter*> owned;
		for (Parameter& p : owned_)
			owned.push_back(&p);
		optimizer_ = make_optimizer(optimizer, owned);
	}
	if (options_.ema_decay) {
		std::vector<NamedTensor> shares;
		for (const Parameter& p : owned_)
			shares.push_back({p.name, p.value});
		averages_ = std::make_unique<VariableAverages>(*options_.ema_decay, shares);
	}
	auto scaler_state = loss_scaler_.state();
	broadcast_named(topology, scaler_state, 0);
	transport_->publish(true);
}

void ParameterServerStrategy::take_initial_values()
{
	// Every rank built the model from the same seed, but the owner's copy is the one that counts:
	// the first publish sends it to every worker.
	for (const VariableSlice& s : placement_.slices)
		if (s.owner == my_owner_index_)
			owned_.push_back({s.name, transport_->owned_value(s), transport_->owned_gradient(s), Tensor{}});
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
	return steps() == options_.replicated.inject_nonfinite_step && rank_ == options_.replicated.inject_nonfinite_rank;
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
	const float divisor = options_.replicated.reduce == ReduceOp::mean ? static_cast<float>(workers_) : 1.0f;
	stats.skipped = !finish_owned(worker_factor, 1.0f / (divisor * loss_scaler_.scale()), &stats.grad_norm);
	{
		timeline::Span span("apply", "update");
		if (!stats.skipped && optimizer_) {
			std::vector<Parameter*> owned;
			for (Parameter& p : owned_)
				owned.push_back(&p);
			optimizer_->step(owned, lr);
		}
		if (!stats.skipped && averages_)
			averages_->update();
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
	TOWER_CHECK(averages_ != nullptr, "use_averages({}) without --ema-decay: no averages are kept", averaged);
	transport_->settle();
	averages_->swap_in(averaged);
	transport_->publish(true);
}

std::vector<NamedTensor> ParameterServerStrategy::variables()
{
	std::vector<NamedTensor> out;
	for (const Parameter& p : owned_)
		out.push_back({p.name, p.value});
	if (optimizer_)
		for (auto& s : optimizer_->state())
			out.push_back(s);
	for (auto& s : loss_scaler_.state())
		out.push_back(s);
	if (averages_)
		for (auto& s : averages_->state())
			out.push_back(s);
	out.push_back({"strategy/global_step", global_step_});
	return out;
}

void ParameterServerStrategy::variables_restored()
{
	// Every owner read its share; rank 0 (always an owner) hands the loss scale and the step
	// counter to the pure workers, and the owners send their values to every worker's model.
	auto shared = loss_scaler_.state();
	shared.push_back({"strategy/global_step", global_step_});
	broadcast_named(topology_, shared, 0);
	transport_->publish(true);
}

uint64_t ParameterServerStrategy::check_replicas() const
{
	if (!is_worker())
		return 0;
	std::vector<NamedTensor> values;
	for (const Parameter* p : parameters_)
		values.push_back({p->name, p->value});
	return check_replicas_of(worker_comm_.get(), values);
}

StrategyFacts ParameterServerStrategy::facts() const
{
	StrategyFacts f;
	f.name = "parameter-server";
	f.transport = transport_->name();
	for (const Parameter& p : owned_)
		f.parameter_bytes += p.value.bytes();
	if (optimizer_)
		for (const NamedTensor& s : optimizer_->state())
			if (s.tensor.dtype() == DType::f32)
				f.optimizer_state_bytes += s.tensor.bytes();
	for (const int64_t e : placement_.owner_elements)
		f.gradient_bytes_per_step += static_cast<size_t>(e) * sizeof(float);
	f.moved_bytes_per_step = transport_->moved_bytes();
	f.buckets = placement_.owners.size();
	f.bucket_word = "owner";
	std::vector<int> servers;
	for (int r = 0; r < options_.ps_ranks; ++r)
		servers.push_back(r);
	f.details = {{"placement", placement_.to_json()}, {"ps_ranks", options_.ps_ranks}, {"server_ranks", servers}};
	if (is_worker()) {
		size_t model = 0;
		for (const Parameter* p : parameters_)
			model += p->value.bytes();
		f.details["worker_copy_bytes"] = model;
	}
	if (averages_)
		f.details["ema_bytes"] = averages_->bytes();
	f.layout = fmt::format("variables placed on the least-loaded owner by bytes (slices of at most {} elements):\n{}",
			       placement_.max_slice, placement_.describe());
	if (f.layout.back() == '\n')
		f.layout.pop_back();
	return f;
}

} // namespace tower
