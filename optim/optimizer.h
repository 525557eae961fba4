// The optimizer interface, its configuration, and the factory that builds one by name.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/tensor/named_tensor.h"
#include "base/tensor/parameter.h"

namespace tower {

struct OptimizerConfig {
	// sgd | momentum | adam | adamw, or none: the program's framework applies the update (tower
	// reduces, unscales and checks the gradients only)
	std::string name = "momentum";
	float momentum = 0.9f;         // momentum only
	bool nesterov = false;         // momentum only
	float beta1 = 0.9f;            // adam, adamw
	float beta2 = 0.999f;          // adam, adamw
	float epsilon = 1e-8f;         // adam, adamw
	// sgd, momentum, adam: L2 added to the gradient (g + wd * p);
	// adamw: decoupled decay of the weights (p -= lr * wd * p).
	float weight_decay = 0.0f;
	// adam, adamw: PyTorch's arithmetic (epsilon after the bias correction; optim/update_rules.h),
	// so that an update applied here matches torch.optim.Adam and AdamW.
	bool pytorch_adam = false;
};

// One stretch of elements an update covers: parameter values, their gradients and, laid out
// alike, the optimizer's per-parameter state (as many tensors as parameter_state() gives).
struct UpdateRange {
	float* value = nullptr;
	const float* grad = nullptr;
	std::array<float*, 2> state{};
	int64_t count = 0;
};

// Updates parameters from their gradients. All state lives in tensors on the parameters' device
// and is created by the constructor, so it can be broadcast from rank 0 and checkpointed before
// the first step. Every rule is element-wise, so an update may also be applied range by range
// (a sharded step does): count_step() once, then update_range() over the ranges.
class Optimizer {
public:
	virtual ~Optimizer() = default;

	// Applies one update with learning rate `lr`: count_step(), then update_range() over each
	// parameter. `parameters` must be the ones the optimizer was made for, in the same order.
	void step(const std::vector<Parameter*>& parameters, float lr);

	// Advances the step counter, which the next update_range() calls use (Adam's bias correction).
	virtual void count_step() = 0;
	// Applies the rule to `range`, whose state pointers follow parameter_state()'s order.
	virtual void update_range(const UpdateRange& range, float lr) const = 0;

	// The state tensors of parameter i (none for plain SGD), in update_range()'s order. The
	// caller may rebind them to views of the same shape, dtype and device holding the same
	// values, as the replicated engine does to lay the state out like the gradients.
	virtual std::vector<Tensor*> parameter_state(size_t i) = 0;

	// The optimizer's state as named tensors sharing its memory: per parameter
	// "<name>/momentum" or "<name>/adam_m" and "<name>/adam_v", and "optimizer/step" (i64 [1],
	// the number of steps taken). Writing into them (a broadcast, a restore) changes the state.
	virtual std::vector<NamedTensor> state() = 0;
	// Zeroes every state tensor, the step counter included: the next update is a first one
	// again (the StyleGAN2 seed's reset_optimizer_state).
	void reset_state();
	// The two halves of reset_state(), for state laid out in memory a node shares (one rank
	// zeroes the per-parameter tensors, every rank its own step counter, the one i64 tensor).
	void reset_parameter_state();
	void reset_step_counter();

	virtual std::string name() const = 0;

protected:
	explicit Optimizer(const std::vector<Parameter*>& parameters);

	Device device_; // where the parameters and the state live
	std::vector<std::string> names_; // the parameters', in order
};

// The names tower train offers, for help texts and error messages (make_optimizer also accepts
// "none", the update left to a framework).
std::vector<std::string> optimizer_names();

// Builds the optimizer `config.name` for `parameters` (f32, all on one device, gradients
// allocated). Unknown names and out-of-range settings throw tower::AgreedError: every rank sees
// the same configuration.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const std::vector<Parameter*>& parameters);

} // namespace tower
