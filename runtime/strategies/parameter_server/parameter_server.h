// The parameter-server strategy: one owner per variable slice, gradients reduced to the owner,
// the optimizer applied once there, and the new values sent back to every worker.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "runtime/ps_placement.h"
#include "runtime/ps_transport.h"
#include "runtime/strategy.h"
#include "runtime/variable_averages.h"

namespace tower {

// Who sends what to whom in one step (docs/strategies.md has the picture):
//  1. every worker's gradient is summed into the owner of each slice (runtime/ps_transport.h:
//     through shared memory when all ranks share a host, else an MPI reduce per owner);
//  2. each owner un-scales its reduced share and adds its sum of squares to one number summed
//     over the ranks, so every rank learns the global norm and whether any value is inf or NaN;
//  3. unless that number is non-finite, each owner applies the optimizer to its share (its
//     optimizer state exists nowhere else) and folds it into its moving averages;
//  4. each owner's new values reach every worker's model.
// Owners keep their variables and state in host memory. With ps_ranks = K > 0, ranks 0..K-1 are
// owners only; otherwise every rank owns a share and trains.
class ParameterServerStrategy final : public Strategy {
	using Clock = std::chrono::steady_clock;

public:
	ParameterServerStrategy(const Topology& topology, const Device& device, Model& model,
				const OptimizerConfig& optimizer, const StrategyOptions& options);

	bool is_worker() const override { return worker_index_ >= 0; }
	int worker_index() const override { return worker_index_; }
	int workers() const override { return workers_; }
	ForwardResult accumulate(const Tensor& images, const Tensor& labels) override;
	StepStats step(const Tensor& images, const Tensor& labels, float lr) override;
	ForwardResult evaluate(const Tensor& images, const Tensor& labels) override;
	bool has_averages() const override { return averages_ != nullptr; }
	void use_averages(bool averaged) override;
	std::vector<NamedTensor> variables() override;
	bool saves_variables() const override { return my_owner_index_ >= 0; }
	void variables_restored() override;
	uint64_t check_replicas() const override;
	const LossScaler& loss_scaler() const override { return loss_scaler_; }
	StrategyFacts facts() const override;

	const Placement& placement() const { return placement_; }

private:
	void take_initial_values();
	bool injecting() const;
	bool finish_owned(float worker_factor, float owner_factor, double* grad_norm);

	const Topology& topology_;
	int rank_;
	Device device_;
	StrategyOptions options_;
	Model* model_;
	std::vector<Parameter*> parameters_;
	int worker_index_ = -1, workers_ = 0;
	int my_owner_index_ = -1; // index into placement_.owners, -1 when this rank owns nothing
	Placement placement_;
	CommHandle worker_comm_;
	// Chosen once: shared memory when every rank shares one host, MPI otherwise. Declared before
	// owned_, which views the owner's share it holds, so it is destroyed after them.
	std::unique_ptr<PsTransport> transport_;
	std::vector<Parameter> owned_;         // this rank's slices: views of the transport's share
	std::unique_ptr<Optimizer> optimizer_; // over owned_ only
	std::unique_ptr<VariableAverages> averages_;
	LossScaler loss_scaler_;
	int micro_batches_ = 0;
	// Steps taken, "strategy/global_step" (i64 [1], host) among an owner's variables.
	Tensor global_step_ = Tensor::zeros({1}, DType::i64, Device{});
	int64_t& steps() const { return *global_step_.data_as<int64_t>(); }
};

} // namespace tower
