// What the strategies with variable owners (parameter-server, async, sync-replicas) share: which
// ranks serve and which train, where each variable slice lives, and the owners' training state.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mpi/topology.h"
#include "runtime/strategies/placement.h"
#include "runtime/strategies/strategy.h"
#include "runtime/strategies/variable_averages.h"

namespace tower {

// Ranks 0..ps_ranks-1 only serve when ps_ranks > 0; otherwise every rank owns a share and trains.
// The strategy binds `owned` to the memory its owner slices live in, then calls start_owning().
class OwnedVariables {
public:
	// Collective over the world: checks --ps-ranks and every rank's gradient list against rank
	// 0's (tower::AgreedError naming what differs), places the variables' slices on the owners,
	// and splits off the workers' communicator.
	OwnedVariables(const Topology& topology, const std::vector<Parameter*>& parameters, const StrategyOptions& options);

	// The owners' optimizer and moving averages over `owned`, once it is bound.
	void start_owning(const OptimizerConfig& optimizer, std::optional<double> ema_decay);

	bool is_worker() const { return worker_index_ >= 0; }
	int worker_index() const { return worker_index_; }
	int workers() const { return workers_; }
	int servers() const { return servers_; }
	// Index into placement().owners; -1 when this rank owns nothing.
	int my_owner() const { return my_owner_; }
	const Placement& placement() const { return placement_; }
	const std::vector<Parameter*>& parameters() const { return parameters_; }
	MPI_Comm worker_comm() const { return worker_comm_.get(); }
	// The model's elements of one slice, its values or its gradient, as a view.
	Tensor model_slice(const VariableSlice& s, bool gradient) const;

	std::vector<Parameter> owned; // this rank's slices
	std::vector<Parameter*> owned_pointers();
	Optimizer* optimizer() { return optimizer_.get(); }
	VariableAverages* averages() { return averages_.get(); }
	const VariableAverages* averages() const { return averages_.get(); }
	Tensor& step_counter() { return global_step_; }
	int64_t& steps() const { return *global_step_.data_as<int64_t>(); }

	// An owner's share of the training state, as a checkpoint sees it: its slices, optimizer
	// state, averages, and the step counter.
	std::vector<NamedTensor> variables();
	// Collective: the workers' models are equal (0 on a server, which holds none).
	uint64_t check_replicas() const;
	// The facts every owner strategy reports alike; the caller adds its transport's.
	StrategyDescription describe(const std::string& name) const;

private:
	std::vector<Parameter*> parameters_;
	int servers_ = 0, workers_ = 0, worker_index_ = -1, my_owner_ = -1;
	Placement placement_;
	CommHandle worker_comm_;
	std::unique_ptr<Optimizer> optimizer_;
	std::unique_ptr<VariableAverages> averages_;
	Tensor global_step_ = Tensor::zeros({1}, DType::i64, Device{}); // i64 [1], host: updates applied
};

} // namespace tower
