// Small training runs shared by the engine's tests: a learnable synthetic data set and a runner.
#pragma once

#include <functional>
#include <vector>

#include "data/fashion_mnist.h"
#include "models/model_factory.h"
#include "runtime/strategies/replicated/replicated_engine.h"

namespace tower::test {

// A ReplicatedEngine driven by a model's forward and backward with a loss scale of its own, the
// way DistributedOptimizer and Tower drive one, for the tests that look inside the engine.
class ModelEngine : public ReplicatedEngine {
public:
	ModelEngine(const Topology& topology, const Device& device, Model& model, Optimizer& optimizer,
		    const ReplicatedEngineOptions& options);
	// Forward and backward of one micro-batch, summed into the gradients without communication.
	ForwardResult accumulate(const Tensor& images, const Tensor& labels);
	// Forward and backward of the last micro-batch, then the engine's step.
	StepStats step(const Tensor& images, const Tensor& labels, float lr);
	ForwardResult evaluate(const Tensor& images, const Tensor& labels) { return model_.forward(images, labels); }
	const LossScaler& loss_scaler() const { return scaler_; }

private:
	Model& model_;
	LossScaler scaler_;
	int passes_ = 0;
};

// Each class lights up its own band of pixels, plus noise: learnable in a few dozen steps.
Dataset synthetic_dataset(int64_t count);

struct RunSpec {
	int64_t batch = 8;      // per rank, per micro-batch
	int accumulate = 1;     // micro-batches per update
	int steps = 50;         // updates
	float lr = 0.05f;
	ModelConfig model{"mlp", 32, 1, 7};
	OptimizerConfig optimizer{};
	ReplicatedEngineOptions options{};
	Device device{};        // where the model, batches and buckets live (the GPU tests pass a GPU)
	// Called after every update with the engine and the stats of that update.
	std::function<void(const ModelEngine&, const StepStats&, int step)> after_step;
};

struct Trained {
	std::vector<std::vector<float>> parameters;
	std::vector<std::vector<float>> optimizer_state; // the f32 tensors of Optimizer::state()
	uint64_t hash = 0;
	float last_loss = 0;
	bool sharded = false; // whether the engine split the update across the node
};

// Trains on `topology` (its world may be MPI_COMM_SELF for a one-rank reference). The sampler
// takes rank `sampler_rank` of `sampler_world` (by default the topology's own).
Trained run_training(const Topology& topology, const RunSpec& spec, const Dataset& data, int sampler_rank = -1,
		     int sampler_world = -1);

// The parameters' f32 values.
std::vector<std::vector<float>> parameter_values(Model& model);

// max over tensors of ||a - b|| / ||b||; a failed check and infinity when a and b are empty or
// differ in tensor count or sizes.
double max_relative_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b);

} // namespace tower::test
