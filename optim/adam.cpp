// Adam with bias correction, and AdamW (weight decay decoupled from the gradient).
#include "optim/adam.h"

#include "optim/parameter_checks.h"
#include "optim/step_counter.h"
#include "optim/update.h"

namespace tower {

Adam::Adam(const std::vector<Parameter*>& parameters, const AdamCoeffs& coeffs)
    : device_(parameters_device(parameters)), step_(make_step_counter(device_)), coeffs_(coeffs)
{
	for (const Parameter* p : parameters) {
		names_.push_back(p->name);
		first_moments_.push_back({p->name + "/adam_m", Tensor::zeros(p->value.shape(), DType::f32, device_)});
		second_moments_.push_back({p->name + "/adam_v", Tensor::zeros(p->value.shape(), DType::f32, device_)});
	}
}

void Adam::step(const std::vector<Parameter*>& parameters, float lr)
{
	check_parameters_match(names_, parameters);
	AdamCoeffs c = coeffs_;
	c.lr = lr;
	// The counter is advanced first: the bias correction of step t uses t, counted from 1.
	int64_t* step = step_.tensor.data_as<int64_t>();
	advance_step(device_, step);
	for (size_t i = 0; i < parameters.size(); ++i) {
		const Parameter& p = *parameters[i];
		adam_update(device_, p.value.data_as<float>(), p.grad.data_as<float>(),
			    first_moments_[i].tensor.data_as<float>(), second_moments_[i].tensor.data_as<float>(),
			    p.value.numel(), step, c);
	}
}

std::vector<NamedTensor> Adam::state()
{
	std::vector<NamedTensor> all;
	for (size_t i = 0; i < names_.size(); ++i) {
		all.push_back(first_moments_[i]);
		all.push_back(second_moments_[i]);
	}
	all.push_back(step_);
	return all;
}

} // namespace tower
