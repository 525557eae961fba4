// Exponential moving averages of variables, kept where their updates are applied.
#pragma once

#include <string>
#include <vector>

#include "base/tensor/named_tensor.h"

namespace tower {

// After each applied update: shadow = decay * shadow + (1 - decay) * variable, starting from the
// variable's value when the averages are made. The shadows live on the variables' device.
class VariableAverages {
public:
	// Throws tower::AgreedError for a decay outside [0, 1) (every rank passes the same).
	static void check_decay(double decay);

	// `variables` share the memory of the tensors to average (f32, one device).
	VariableAverages(double decay, const std::vector<NamedTensor>& variables);

	// Folds the variables' current values into the shadows.
	void update();

	// Puts the averages into the variables (keeping the variables' own values aside), or puts
	// the variables' own values back. With `writes` false only the state changes: another
	// process swaps the variables, which it shares with this one.
	void swap_in(bool averaged, bool writes = true);
	bool averaged() const { return averaged_; }

	// The shadows, named "<variable>/ema".
	std::vector<NamedTensor> state() const;
	size_t bytes() const;
	double decay() const { return decay_; }

private:
	double decay_;
	std::vector<NamedTensor> variables_;
	std::vector<Tensor> shadows_;
	std::vector<Tensor> kept_; // the variables' own values while averaged
	bool averaged_ = false;
};

} // namespace tower
