// The replicated strategy: every rank holds the whole model and optimizer, kept in lock-step by
// the replicated engine's fused all-reduce.
#pragma once

#include <memory>

#include "runtime/strategies/replicated/replicated_engine.h"
#include "runtime/strategies/strategy.h"
#include "runtime/strategies/variable_averages.h"

namespace tower {

class ReplicatedStrategy final : public Strategy {
public:
	ReplicatedStrategy(const Topology& topology, const Device& device, Model& model,
			   const OptimizerConfig& optimizer, const StrategyOptions& options);

	int worker_index() const override { return rank_; }
	int workers() const override { return world_size_; }
	ForwardResult accumulate(const Tensor& images, const Tensor& labels) override;
	StepStats step(const Tensor& images, const Tensor& labels, float lr) override;
	ForwardResult evaluate(const Tensor& images, const Tensor& labels) override;
	bool has_averages() const override { return averages_ != nullptr; }
	void use_averages(bool averaged) override;
	std::vector<NamedTensor> variables() override;
	bool saves_variables() const override { return rank_ == 0; }
	void variables_restored() override;
	uint64_t check_replicas() const override { return engine_->check_replicas(); }
	const LossScaler& loss_scaler() const override { return engine_->loss_scaler(); }
	StrategyFacts facts() const override;

private:
	const Topology& topology_;
	int rank_, world_size_;
	Model& model_;
	std::unique_ptr<Optimizer> optimizer_;
	std::unique_ptr<ReplicatedEngine> engine_; // after optimizer_: it binds the optimizer's state
	std::unique_ptr<VariableAverages> averages_;
};

} // namespace tower
