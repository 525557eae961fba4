// Stochastic gradient descent, plain or with (Nesterov) momentum, and L2 weight decay.
#include "optim/sgd.h"

#include "optim/parameter_checks.h"
#include "optim/step_counter.h"
#include "optim/update.h"

namespace tower {

Sgd::Sgd(const std::vector<Parameter*>& parameters, float momentum, bool nesterov, float weight_decay)
    : device_(parameters_device(parameters)), step_(make_step_counter(device_))
{
	coeffs_.momentum = momentum;
	coeffs_.nesterov = nesterov;
	coeffs_.weight_decay = weight_decay;
	for (const Parameter* p : parameters) {
		names_.push_back(p->name);
		if (momentum > 0.0f)
			buffers_.push_back({p->name + "/momentum", Tensor::zeros(p->value.shape(), DType::f32, device_)});
	}
}

void Sgd::step(const std::vector<Parameter*>& parameters, float lr)
{
	check_parameters_match(names_, parameters);
	SgdCoeffs c = coeffs_;
	c.lr = lr;
	for (size_t i = 0; i < parameters.size(); ++i) {
		const Parameter& p = *parameters[i];
		if (buffers_.empty())
			sgd_update(device_, p.value.data_as<float>(), p.grad.data_as<float>(), p.value.numel(), c);
		else
			momentum_update(device_, p.value.data_as<float>(), p.grad.data_as<float>(),
					buffers_[i].tensor.data_as<float>(), p.value.numel(), c);
	}
	advance_step(device_, step_.tensor.data_as<int64_t>());
}

std::vector<NamedTensor> Sgd::state()
{
	std::vector<NamedTensor> all = buffers_;
	all.push_back(step_);
	return all;
}

} // namespace tower
