// The replicated strategy: every rank sees the whole model and optimizer (one copy per node when
// the update is sharded), kept in lock-step by the replicated engine's fused all-reduce.
#pragma once

#include <memory>

#include "runtime/strategies/replicated/replicated_engine.h"
#include "runtime/strategies/strategy.h"
#include "runtime/strategies/variable_averages.h"

namespace tower {

class ReplicatedStrategy final : public Strategy {
public:
	ReplicatedStrategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
			   const OptimizerConfig& optimizer, const StrategyOptions& options);

	int worker_index() const override { return rank_; }
	int workers() const override { return world_size_; }
	GradReadyFn begin_final_backward() override { return engine_->begin_final_backward(); }
	StepStats step(const StepRequest& request) override;
	bool has_averages() const override { return averages_ != nullptr; }
	void use_averages(bool averaged) override;
	void reset_optimizer_state() override;
	std::vector<NamedTensor> variables() override;
	bool saves_variables() const override { return rank_ == 0; }
	void variables_restored() override;
	uint64_t check_replicas() const override { return engine_->check_replicas(); }
	int64_t steps() const override { return engine_->steps_taken(); }
	StrategyDescription describe() const override;

private:
	const Topology& topology_;
	int rank_, world_size_;
	std::vector<Parameter*> parameters_;
	std::unique_ptr<Optimizer> optimizer_;
	std::unique_ptr<ReplicatedEngine> engine_; // after optimizer_: it binds the optimizer's state
	std::unique_ptr<VariableAverages> averages_;
};

} // namespace tower
