// The parameter-server strategy: one owner per variable slice, gradients reduced to the owner,
// the optimizer applied once there, and the new values sent back to every worker.
#include "runtime/parameter_server.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "collectives/broadcast_named.h"
#include "collectives/signature_check.h"
#include "models/ops.h"
#include "runtime/base/error.h"
#include "runtime/base/memory.h"
#include "runtime/base/collective_debug.h"
#include "runtime/base/mpi_check.h"
#include "runtime/base/watched_wait.h"
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

// Calls `piece(offset, count)` over [0, count) in pieces MPI's int counts can carry.
template <typename Fn> void in_pieces(int64_t count, DType dtype, Fn piece)
{
	const auto most = static_cast<int64_t>(mpi_max_count(dtype));
	for (int64_t at = 0; at < count; at += most)
		piece(at, static_cast<int>(std::min(most, count - at)));
}

} // namespace

ParameterServerStrategy::ParameterServerStrategy(const Topology& topology, const Device& device, Model& model,
						 const OptimizerConfig& optimizer, const StrategyOptions& options)
	: topology_(topology), rank_(topology.rank()), device_(device), world_(topology.world()), options_(options), model_(&model),
	  parameters_(model.parameters()), loss_scaler_(options.replicated.loss_scale)
{
	check_options(options_, topology.size());
	std::vector<NamedTensor> gradients;
	for (const Parameter* p : parameters_)
		gradients.push_back({p->name, p->grad});
	check_signatures(world_, gradients, 0, "gradient list");

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
	make_channels(topology);

	const int64_t held = is_worker() ? channels_.back().offset + channels_.back().count
					 : placement_.owner_elements[static_cast<size_t>(my_owner_index_)];
	gradients_.assign(static_cast<size_t>(held), 0.0f);
	values_.assign(static_cast<size_t>(held), 0.0f);
	if (options_.replicated.compress != DType::f32)
		compressed_.assign(static_cast<size_t>(held), 0);
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
	publish();
}

void ParameterServerStrategy::make_channels(const Topology& topology)
{
	MPI_Comm workers = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split(world_, is_worker() ? 0 : MPI_UNDEFINED, rank_, &workers));
	worker_comm_ = CommHandle(workers);
	int64_t offset = 0;
	for (size_t o = 0; o < placement_.owners.size(); ++o) {
		Channel c;
		c.owner = placement_.owners[o];
		c.offset = offset;
		c.count = placement_.owner_elements[o];
		offset += c.count;
		// The owner first, so it is rank 0 of its channel; dedicated servers stay out of the others.
		const bool member = is_worker() || rank_ == c.owner;
		MPI_Comm comm = MPI_COMM_NULL;
		TOWER_MPI(MPI_Comm_split(topology.world(), member ? 0 : MPI_UNDEFINED, rank_ == c.owner ? -1 : rank_, &comm));
		c.comm = CommHandle(comm);
		c.raw = comm;
		c.root = 0;
		channels_.push_back(std::move(c));
	}
}

int64_t ParameterServerStrategy::segment_base(int owner_index) const
{
	return is_worker() ? channels_[static_cast<size_t>(owner_index)].offset : 0;
}

Tensor ParameterServerStrategy::model_slice(const VariableSlice& s, bool gradient) const
{
	const Parameter& p = *parameters_[s.variable];
	const Tensor& whole = gradient ? p.grad : p.value;
	char* at = static_cast<char*>(whole.data()) + static_cast<size_t>(s.offset) * sizeof(float);
	return Tensor::view(at, {s.count}, DType::f32, whole.device());
}

Tensor ParameterServerStrategy::buffer_slice(std::vector<float>& buffer, const VariableSlice& s) const
{
	float* at = buffer.data() + segment_base(s.owner) + s.segment_offset;
	return Tensor::view(at, {s.count}, DType::f32, Device{});
}

void ParameterServerStrategy::take_initial_values()
{
	// Every rank built the model from the same seed, but the owner's copy is the one that counts:
	// publish() sends it to every worker.
	for (const VariableSlice& s : placement_.slices) {
		if (s.owner != my_owner_index_)
			continue;
		Tensor value = buffer_slice(values_, s);
		value.copy_from(model_slice(s, false));
		owned_.push_back({s.name, value, buffer_slice(gradients_, s)});
	}
}

void ParameterServerStrategy::publish()
{
	// A rank that owns nothing only receives: its side of the broadcast is a fetch.
	timeline::Span span(my_owner_index_ < 0 ? "fetch" : "publish", "comm");
	span.arg("bytes", static_cast<int64_t>(values_.size() * sizeof(float)));
	for (size_t o = 0; o < channels_.size(); ++o) {
		const Channel& c = channels_[o];
		if (c.raw == MPI_COMM_NULL)
			continue;
		float* segment = values_.data() + segment_base(static_cast<int>(o));
		check_collective(c.raw, {"owner broadcast", static_cast<size_t>(c.count) * sizeof(float), DType::f32, c.root});
		in_pieces(c.count, DType::f32, [&](int64_t at, int n) {
			MPI_Request request = MPI_REQUEST_NULL;
			TOWER_MPI(MPI_Ibcast(segment + at, n, MPI_FLOAT, c.root, c.raw, &request));
			wait_request(request, {"parameter server: values from owner", c.raw, -1, "owner", static_cast<int64_t>(o)});
		});
	}
	if (!is_worker())
		return;
	for (const VariableSlice& s : placement_.slices) {
		Tensor target = model_slice(s, false);
		target.copy_from(buffer_slice(values_, s));
	}
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

void ParameterServerStrategy::pack_gradients(float factor)
{
	for (const VariableSlice& s : placement_.slices)
		buffer_slice(gradients_, s).copy_from(model_slice(s, true));
	if (factor != 1.0f)
		for (float& g : gradients_)
			g *= factor;
}

void ParameterServerStrategy::poison_if_injecting()
{
	if (steps() != options_.replicated.inject_nonfinite_step || rank_ != options_.replicated.inject_nonfinite_rank ||
	    gradients_.empty())
		return;
	gradients_[0] = std::numeric_limits<float>::quiet_NaN();
}

void ParameterServerStrategy::reduce_to_owners()
{
	const DType type = options_.replicated.compress;
	const bool narrow = type != DType::f32;
	timeline::Span span("push", "comm");
	span.arg("bytes", static_cast<int64_t>(gradients_.size() * dtype_size(type))).arg("dtype", dtype_name(type));
	if (narrow)
		cpu_ops().cast(Tensor::view(gradients_.data(), {static_cast<int64_t>(gradients_.size())}, DType::f32, Device{}),
			       Tensor::view(compressed_.data(), {static_cast<int64_t>(compressed_.size())}, type, Device{}),
			       false);
	const MPI_Datatype datatype = mpi_datatype(type);
	const MPI_Op op = reduce_ops_.get(type, ReduceOp::sum);
	for (size_t o = 0; o < channels_.size(); ++o) {
		const Channel& c = channels_[o];
		if (c.raw == MPI_COMM_NULL)
			continue;
		const int64_t base = segment_base(static_cast<int>(o));
		char* segment = narrow ? reinterpret_cast<char*>(compressed_.data() + base)
				       : reinterpret_cast<char*>(gradients_.data() + base);
		const bool root = rank_ == c.owner;
		check_collective(c.raw, {"reduce to owner", static_cast<size_t>(c.count) * dtype_size(type), type, c.root});
		in_pieces(c.count, type, [&](int64_t at, int n) {
			char* piece = segment + static_cast<size_t>(at) * dtype_size(type);
			// The owner's own contribution (zeros on a dedicated server) is already in place.
			MPI_Request request = MPI_REQUEST_NULL;
			TOWER_MPI(MPI_Ireduce(root ? MPI_IN_PLACE : piece, root ? piece : nullptr, n, datatype, op, c.root,
					      c.raw, &request));
			wait_request(request, {"parameter server: gradients to owner", c.raw, -1, "owner", static_cast<int64_t>(o)});
		});
	}
	if (narrow && my_owner_index_ >= 0) {
		const int64_t base = segment_base(my_owner_index_);
		const int64_t count = channels_[static_cast<size_t>(my_owner_index_)].count;
		cpu_ops().cast(Tensor::view(compressed_.data() + base, {count}, type, Device{}),
			       Tensor::view(gradients_.data() + base, {count}, DType::f32, Device{}), false);
	}
}

bool ParameterServerStrategy::finish_owned(float factor, double* grad_norm)
{
	// Squares of finite f32 values summed in f64 cannot overflow: the global sum is non-finite
	// exactly when some reduced gradient is inf or NaN, and every rank receives the same sum.
	double squares = 0;
	if (my_owner_index_ >= 0) {
		const auto& c = channels_[static_cast<size_t>(my_owner_index_)];
		float* share = gradients_.data() + segment_base(my_owner_index_);
		for (int64_t i = 0; i < c.count; ++i) {
			share[i] *= factor;
			squares += static_cast<double>(share[i]) * static_cast<double>(share[i]);
		}
	}
	check_collective(world_, {"gradient norm all-reduce", sizeof squares, DType::f64});
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, &squares, 1, MPI_DOUBLE, MPI_SUM, world_, &request));
	wait_request(request, {"parameter server: gradient norm", world_});
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
		pack_gradients(worker_factor);
	} else {
		std::fill(gradients_.begin(), gradients_.end(), 0.0f);
	}
	poison_if_injecting();

	const auto comm_start = Clock::now();
	reduce_to_owners();
	const float divisor = options_.replicated.reduce == ReduceOp::mean ? static_cast<float>(workers_) : 1.0f;
	{
		timeline::Span span("apply", "update");
		stats.skipped = !finish_owned(1.0f / (divisor * loss_scaler_.scale()), &stats.grad_norm);
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
		publish();
	stats.allreduce_s = seconds(Clock::now() - comm_start);
	stats.allreduce_bytes = moved_bytes();
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
	averages_->swap_in(averaged);
	publish();
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
	publish();
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

size_t ParameterServerStrategy::moved_bytes() const
{
	// Gradients travel to the owners in the transport type; values come back in f32.
	size_t total = 0;
	for (const int64_t e : placement_.owner_elements)
		total += static_cast<size_t>(e) * (dtype_size(options_.replicated.compress) + sizeof(float));
	return total;
}

StrategyFacts ParameterServerStrategy::facts() const
{
	StrategyFacts f;
	f.name = "parameter-server";
	f.transport = "reduce to owners, broadcast from owners";
	for (const Parameter& p : owned_)
		f.parameter_bytes += p.value.bytes();
	if (optimizer_)
		for (const NamedTensor& s : optimizer_->state())
			if (s.tensor.dtype() == DType::f32)
				f.optimizer_state_bytes += s.tensor.bytes();
	for (const int64_t e : placement_.owner_elements)
		f.gradient_bytes_per_step += static_cast<size_t>(e) * sizeof(float);
	f.moved_bytes_per_step = moved_bytes();
	f.buckets = channels_.size();
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
