// Stochastic gradient descent, plain or with (Nesterov) momentum, and L2 weight decay.
#pragma once

#include "optim/optimizer.h"
#include "optim/update_rules.h"

namespace tower {

class Sgd final : public Optimizer {
public:
	// momentum 0 is plain SGD (no buffers); otherwise one "<name>/momentum" buffer per parameter.
	Sgd(const std::vector<Parameter*>& parameters, float momentum, bool nesterov, float weight_decay);

	void count_step() override;
	void update_range(const UpdateRange& range, float lr) const override;
	std::vector<Tensor*> parameter_state(size_t i) override;
	std::vector<NamedTensor> state() override;
	std::string name() const override { return coeffs_.momentum > 0.0f ? "momentum" : "sgd"; }

private:
	std::vector<NamedTensor> buffers_; // empty for plain SGD
	NamedTensor step_;
	SgdCoeffs coeffs_;
};

} // namespace tower
