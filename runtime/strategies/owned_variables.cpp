// What the strategies with variable owners (parameter-server, async, sync-replicas) share: which
// ranks serve and which train, where each variable slice lives, and the owners' training state.
#include "runtime/strategies/owned_variables.h"

#include <algorithm>

#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "collectives/signature_check.h"
#include "runtime/safety/replica_check.h"

namespace tower {

namespace {

void check_server_count(int ps_ranks, int world_size)
{
	if (ps_ranks < 0 || (ps_ranks > 0 && ps_ranks >= world_size))
		throw AgreedError(fmt::format("`ps_ranks` {}: dedicated server ranks must leave at least one worker "
					      "among the {} rank(s) of this job; use 0 to place the variables on every "
					      "rank, or 1..{} servers with more ranks",
					      ps_ranks, world_size, std::max(world_size - 1, 0)));
}

} // namespace

OwnedVariables::OwnedVariables(const Topology& topology, const std::vector<Parameter*>& parameters,
			       const StrategyOptions& options)
	: parameters_(parameters)
{
	check_server_count(options.ps_ranks, topology.size());
	check_gradient_list(topology.world(), parameters_);

	const int rank = topology.rank();
	servers_ = options.ps_ranks;
	workers_ = topology.size() - servers_;
	worker_index_ = rank >= servers_ ? rank - servers_ : -1;
	std::vector<int> owners;
	for (int r = 0; r < (servers_ > 0 ? servers_ : topology.size()); ++r)
		owners.push_back(r);
	std::vector<VariableSize> sizes;
	for (const Parameter* p : parameters_)
		sizes.push_back({p->name, p->value.numel()});
	placement_ = place_variables(sizes, owners);
	const auto mine = std::find(owners.begin(), owners.end(), rank);
	my_owner_ = mine == owners.end() ? -1 : static_cast<int>(mine - owners.begin());
	MPI_Comm workers = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split(topology.world(), is_worker() ? 0 : MPI_UNDEFINED, rank, &workers));
	worker_comm_ = CommHandle(workers);
}

void OwnedVariables::start_owning(const OptimizerConfig& optimizer, std::optional<double> ema_decay)
{
	if (!owned.empty())
		optimizer_ = make_optimizer(optimizer, owned_pointers());
	if (ema_decay) {
		std::vector<NamedTensor> shares;
		for (const Parameter& p : owned)
			shares.push_back({p.name, p.value});
		averages_ = std::make_unique<VariableAverages>(*ema_decay, shares);
	}
}

Tensor OwnedVariables::model_slice(const VariableSlice& s, bool gradient) const
{
	const Parameter& p = *parameters_[s.variable];
	const Tensor& whole = gradient ? p.grad : p.value;
	char* at = static_cast<char*>(whole.data()) + static_cast<size_t>(s.offset) * sizeof(float);
	return Tensor::view(at, {s.count}, DType::f32, whole.device());
}

std::vector<Parameter*> OwnedVariables::owned_pointers()
{
	std::vector<Parameter*> out;
	for (Parameter& p : owned)
		out.push_back(&p);
	return out;
}

std::vector<NamedTensor> OwnedVariables::variables()
{
	std::vector<NamedTensor> out;
	for (const Parameter& p : owned)
		out.push_back({p.name, p.value});
	if (optimizer_)
		for (auto& s : optimizer_->state())
			out.push_back(s);
	if (averages_)
		for (auto& s : averages_->state())
			out.push_back(s);
	out.push_back({std::string(step_counter_name), global_step_});
	return out;
}

uint64_t OwnedVariables::check_replicas() const
{
	if (!is_worker())
		return 0;
	std::vector<NamedTensor> values;
	for (const Parameter* p : parameters_)
		values.push_back({p->name, p->value});
	return check_replicas_of(worker_comm_.get(), values);
}

StrategyDescription OwnedVariables::describe(const std::string& name) const
{
	StrategyDescription f;
	f.name = name;
	for (const Parameter& p : owned)
		f.parameter_bytes += p.value.bytes();
	if (optimizer_)
		for (const NamedTensor& s : optimizer_->state())
			if (s.tensor.dtype() == DType::f32)
				f.optimizer_state_bytes += s.tensor.bytes();
	for (const int64_t e : placement_.owner_elements)
		f.gradient_bytes_per_step += static_cast<size_t>(e) * sizeof(float);
	f.buckets = placement_.owners.size();
	f.bucket_word = "owner";
	std::vector<int> servers;
	for (int r = 0; r < servers_; ++r)
		servers.push_back(r);
	f.details = {{"placement", placement_.to_json()}, {"ps_ranks", servers_}, {"server_ranks", servers}};
	if (averages_)
		f.details["ema_bytes"] = averages_->bytes();
	return f;
}

} // namespace tower
