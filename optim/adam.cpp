// Adam with bias correction, and AdamW (weight decay decoupled from the gradient).
#include "optim/adam.h"

#include "optim/step_counter.h"
#include "optim/update.h"

namespace tower {

Adam::Adam(const std::vector<Parameter*>& parameters, const AdamCoeffs& coeffs)
    : Optimizer(parameters), step_(make_step_counter(device_)), coeffs_(coeffs)
{
	for (const Parameter* p : parameters) {
		first_moments_.push_back({p->name + "/adam_m", Tensor::zeros(p->value.shape(), DType::f32, device_)});
		second_moments_.push_back({p->name + "/adam_v", Tensor::zeros(p->value.shape(), DType::f32, device_)});
	}
}

// The counter is advanced before the updates: the bias correction of step t uses t, counted from 1.
void Adam::count_step()
{
	advance_step(device_, step_.tensor.data_as<int64_t>());
}

void Adam::update_range(const UpdateRange& range, float lr) const
{
	AdamCoeffs c = coeffs_;
	c.lr = lr;
	adam_update(device_, range.value, range.grad, range.state[0], range.state[1], range.count,
		    step_.tensor.data_as<int64_t>(), c);
}

std::vector<Tensor*> Adam::parameter_state(size_t i)
{
	return {&first_moments_.at(i).tensor, &second_moments_.at(i).tensor};
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
