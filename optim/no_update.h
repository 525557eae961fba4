// The optimizer of programs whose framework applies the update itself: tower reduces the
// gradients, unscales and checks them, and leaves the parameters alone.
#pragma once

#include "optim/optimizer.h"

namespace tower {

// "none": counts steps and holds no other state. The PyTorch front end wraps a torch optimizer
// this way; tower train does not offer it (optimizer_names() leaves it out).
class NoUpdate final : public Optimizer {
public:
	explicit NoUpdate(const std::vector<Parameter*>& parameters);

	void count_step() override;
	void update_range(const UpdateRange&, float) const override {}
	std::vector<Tensor*> parameter_state(size_t) override { return {}; }
	std::vector<NamedTensor> state() override { return {step_}; }
	std::string name() const override { return "none"; }

private:
	NamedTensor step_;
};

} // namespace tower
