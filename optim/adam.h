// Adam with bias correction, and AdamW (weight decay decoupled from the gradient).
#pragma once

#include "optim/optimizer.h"
#include "optim/update_rules.h"

namespace tower {

class Adam final : public Optimizer {
public:
	// Creates zero "<name>/adam_m" and "<name>/adam_v" for every parameter. With
	// coeffs.decoupled the weight decay shrinks the weights directly (AdamW); otherwise it is
	// added to the gradient.
	Adam(const std::vector<Parameter*>& parameters, const AdamCoeffs& coeffs);

	void count_step() override;
	void update_range(const UpdateRange& range, float lr) const override;
	std::vector<Tensor*> parameter_state(size_t i) override;
	std::vector<NamedTensor> state() override;
	std::string name() const override { return coeffs_.decoupled ? "adamw" : "adam"; }

private:
	std::vector<NamedTensor> first_moments_;
	std::vector<NamedTensor> second_moments_;
	NamedTensor step_;
	AdamCoeffs coeffs_;
};

} // namespace tower
