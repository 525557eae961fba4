// Stochastic gradient descent, plain or with (Nesterov) momentum, and L2 weight decay.
#include "optim/sgd.h"

#include "optim/step_counter.h"
#include "optim/update.h"

namespace tower {

Sgd::Sgd(const std::vector<Parameter*>& parameters, float momentum, bool nesterov, float weight_decay)
    : Optimizer(parameters), step_(make_step_counter(device_))
{
	coeffs_.momentum = momentum;
	coeffs_.nesterov = nesterov;
	coeffs_.weight_decay = weight_decay;
	if (momentum > 0.0f)
		for (const Parameter* p : parameters)
			buffers_.push_back({p->name + "/momentum", Tensor::zeros(p->value.shape(), DType::f32, device_)});
}

void Sgd::count_step()
{
	advance_step(device_, step_.tensor.data_as<int64_t>());
}

void Sgd::update_range(const UpdateRange& range, float lr) const
{
	SgdCoeffs c = coeffs_;
	c.lr = lr;
	if (buffers_.empty())
		sgd_update(device_, range.value, range.grad, range.count, c);
	else
		momentum_update(device_, range.value, range.grad, range.state[0], range.count, c);
}

std::vector<Tensor*> Sgd::parameter_state(size_t i)
{
	if (buffers_.empty())
		return {};
	return {&buffers_.at(i).tensor};
}

std::vector<NamedTensor> Sgd::state()
{
	std::vector<NamedTensor> all = buffers_;
	all.push_back(step_);
	return all;
}

} // namespace tower
