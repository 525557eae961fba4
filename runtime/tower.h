// One tower: this rank's replica of a Model, trained through a distributed optimizer over its parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model.h"
#include "runtime/distributed_optimizer.h"

namespace tower {

// The model-level client of DistributedOptimizer that the trainer, tower train and the built-in
// models use: it runs the model's forward and backward the way the optimizer asks and times them.
// A program with a model of its own, several models or a loss of its own uses the optimizer
// directly (docs/library.md).
class Tower {
public:
	// Collective over the topology's world: an optimizer over the model's parameters, computing
	// in the model's precision. The model must outlive the tower.
	Tower(const Topology& topology, const Device& device, Model& model, const OptimizerConfig& optimizer,
	      const StrategyOptions& options, const DistributedOptimizerSettings& settings = {});

	// Forward and backward of one micro-batch, summing into the gradients with no communication;
	// the next step() adds its own micro-batch and divides by their number.
	ForwardResult accumulate(const Batch& batch);
	// One training step on this rank's (last) micro-batch with learning rate `lr`: forward,
	// backward with the gradients reported as they become final, then the optimizer's step.
	// A server rank passes an empty batch. Lock-step strategies only.
	StepStats step(const Batch& batch, float lr);
	// One worker step of a detached strategy (async, sync-replicas) between its start() and
	// finish(): fetch, forward, backward, push. False, without computing, once the run is over.
	bool work(const Batch& batch, StepStats* stats);
	// Forward only, with the parameters the model holds now (a worker's).
	ForwardResult evaluate(const Batch& batch);

	// The same for a classifier's batch of images and labels.
	ForwardResult accumulate(const Tensor& images, const Tensor& labels) { return accumulate(classified(images, labels)); }
	StepStats step(const Tensor& images, const Tensor& labels, float lr) { return step(classified(images, labels), lr); }
	bool work(const Tensor& images, const Tensor& labels, StepStats* stats)
	{
		return work(classified(images, labels), stats);
	}
	ForwardResult evaluate(const Tensor& images, const Tensor& labels) { return evaluate(classified(images, labels)); }

	DistributedOptimizer& optimizer() { return optimizer_; }
	const DistributedOptimizer& optimizer() const { return optimizer_; }
	Model& model() { return model_; }

	bool is_worker() const { return optimizer_.is_worker(); }
	int worker_index() const { return optimizer_.worker_index(); }
	int workers() const { return optimizer_.workers(); }
	uint64_t check_replicas() const { return optimizer_.check_replicas(); }
	StrategyFacts facts() const { return optimizer_.facts(); }
	std::vector<NamedTensor> variables() { return optimizer_.variables(); }
	bool has_averages() const { return optimizer_.has_averages(); }
	void use_averages(bool averaged) { optimizer_.use_averages(averaged); }
	const LossScaler& loss_scaler() const { return optimizer_.loss_scaler(); }
	DetachedRun* detached() { return optimizer_.detached(); }

private:
	static Batch classified(const Tensor& images, const Tensor& labels)
	{
		return images.defined() ? Batch{{{"images", images}, {"labels", labels}}} : Batch{};
	}
	ForwardResult forward(const Batch& batch);
	void backward(bool last);

	Device device_;
	Model& model_;
	DistributedOptimizer optimizer_;
};

} // namespace tower
