// The factory that builds an optimizer by name and checks its settings.
#include "optim/optimizer.h"

#include <algorithm>

#include "optim/adam.h"
#include "optim/no_update.h"
#include "optim/parameter_checks.h"
#include "optim/sgd.h"
#include "base/error.h"

namespace tower {

namespace {

// A setting every rank reads from the same configuration, so a bad one is an agreed error.
void require(bool ok, const std::string& what)
{
	if (!ok)
		throw AgreedError(what);
}

void check_settings(const OptimizerConfig& c)
{
	require(c.weight_decay >= 0.0f, fmt::format("weight decay {} is negative; use 0 or more", c.weight_decay));
	require(c.momentum >= 0.0f && c.momentum < 1.0f,
		fmt::format("momentum {} is outside [0, 1); 0.9 is usual", c.momentum));
	require(c.beta1 >= 0.0f && c.beta1 < 1.0f, fmt::format("Adam beta1 {} is outside [0, 1); 0.9 is usual", c.beta1));
	require(c.beta2 >= 0.0f && c.beta2 < 1.0f,
		fmt::format("Adam beta2 {} is outside [0, 1); 0.999 is usual", c.beta2));
	require(c.epsilon > 0.0f, fmt::format("Adam epsilon {} must be positive; 1e-8 is usual", c.epsilon));
	require(!c.nesterov || c.name == "momentum",
		fmt::format("Nesterov is an option of the momentum optimizer, not of '{}'", c.name));
	require(c.name != "momentum" || c.momentum > 0.0f,
		"the momentum optimizer needs momentum above 0; use 'sgd' for none");
}

AdamCoeffs adam_coeffs(const OptimizerConfig& c, bool decoupled)
{
	AdamCoeffs a;
	a.beta1 = c.beta1;
	a.beta2 = c.beta2;
	a.epsilon = c.epsilon;
	a.weight_decay = c.weight_decay;
	a.decoupled = decoupled;
	a.pytorch_form = c.pytorch_adam;
	return a;
}

} // namespace

Optimizer::Optimizer(const std::vector<Parameter*>& parameters) : device_(parameters_device(parameters))
{
	for (const Parameter* p : parameters)
		names_.push_back(p->name);
}

void Optimizer::step(const std::vector<Parameter*>& parameters, float lr)
{
	check_parameters_match(names_, parameters);
	count_step();
	// Last parameter first: the first layers' values are then the last written, still in cache
	// when the next forward pass begins with them. Each parameter's update is its own, so the
	// order changes no bits.
	for (size_t i = parameters.size(); i-- > 0;) {
		const Parameter& p = *parameters[i];
		UpdateRange range{p.value.data_as<float>(), p.grad.data_as<float>(), {}, p.value.numel()};
		const auto state = parameter_state(i);
		for (size_t k = 0; k < state.size(); ++k)
			range.state[k] = state[k]->data_as<float>();
		update_range(range, lr);
	}
}

std::vector<std::string> optimizer_names()
{
	return {"sgd", "momentum", "adam", "adamw"};
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const std::vector<Parameter*>& parameters)
{
	if (config.name == "none")
		return std::make_unique<NoUpdate>(parameters);
	const auto names = optimizer_names();
	require(std::find(names.begin(), names.end(), config.name) != names.end(),
		fmt::format("unknown optimizer '{}'; valid optimizers: {}", config.name, fmt::join(names, ", ")));
	check_settings(config);
	if (config.name == "sgd")
		return std::make_unique<Sgd>(parameters, 0.0f, false, config.weight_decay);
	if (config.name == "momentum")
		return std::make_unique<Sgd>(parameters, config.momentum, config.nesterov, config.weight_decay);
	return std::make_unique<Adam>(parameters, adam_coeffs(config, config.name == "adamw"));
}

void Optimizer::reset_state()
{
	reset_parameter_state();
	reset_step_counter();
}

void Optimizer::reset_parameter_state()
{
	for (size_t i = 0; i < names_.size(); ++i)
		for (Tensor* t : parameter_state(i))
			t->zero();
}

void Optimizer::reset_step_counter()
{
	for (NamedTensor& s : state())
		if (s.tensor.dtype() == DType::i64)
			s.tensor.zero();
}

} // namespace tower
