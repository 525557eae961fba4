// The parameter-server strategy: one owner per variable slice, gradients reduced to the owner,
// the optimizer applied once there, and the new values sent back to every worker.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "runtime/strategies/owned_variables.h"
#include "runtime/strategies/parameter_server/ps_transport.h"
#include "runtime/strategies/strategy.h"

namespace tower {

// Who sends what to whom in one step (docs/strategies.md has the picture):
//  1. every worker's gradient is summed into the owner of each slice (runtime/strategies/parameter_server/ps_transport.h:
//     through shared memory when all ranks share a host, on the CPU, uncompressed; else an MPI
//     reduce per owner);
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
	ParameterServerStrategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
				const OptimizerConfig& optimizer, const StrategyOptions& options);

	bool is_worker() const override { return core_.is_worker(); }
	int worker_index() const override { return core_.worker_index(); }
	int workers() const override { return core_.workers(); }
	GradReadyFn begin_final_backward() override { return {}; }
	StepStats step(const StepRequest& request) override;
	bool has_averages() const override { return core_.averages() != nullptr; }
	void use_averages(bool averaged) override;
	void reset_optimizer_state() override;
	std::vector<NamedTensor> variables() override;
	bool saves_variables() const override { return core_.my_owner() >= 0; }
	void variables_restored() override;
	uint64_t check_replicas() const override;
	int64_t steps() const override { return core_.steps(); }
	StrategyDescription describe() const override;

	const Placement& placement() const { return core_.placement(); }

private:
	void take_initial_values();
	bool injecting() const;
	bool finish_owned(float worker_factor, float owner_factor, double* grad_norm);

	const Topology& topology_;
	int rank_;
	Device device_;
	StrategyOptions options_;
	// Chosen once: shared memory when every rank shares one host, MPI otherwise. Declared before
	// core_, whose owned slices view the owner's share it holds, so it is destroyed after them.
	std::unique_ptr<PsTransport> transport_;
	OwnedVariables core_; // roles, placement; owned slices are views of the transport's share
};

} // namespace tower
