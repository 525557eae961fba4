// Checks optimizers apply to the parameters they are made for and stepped with.
#include "optim/parameter_checks.h"

#include "base/error.h"

namespace tower {

Device parameters_device(const std::vector<Parameter*>& parameters)
{
	if (parameters.empty())
		throw Error("an optimizer was given no parameters; pass the model's parameters()");
	const Device device = parameters.front()->value.device();
	for (const Parameter* p : parameters) {
		if (p->value.dtype() != DType::f32 || p->grad.dtype() != DType::f32)
			throw Error(fmt::format("parameter {} is {} with a {} gradient; the optimizers update f32 only",
						p->name, dtype_name(p->value.dtype()), dtype_name(p->grad.dtype())));
		if (p->grad.shape() != p->value.shape() || !p->grad.defined())
			throw Error(fmt::format("parameter {} has shape {} but its gradient has {}; allocate the "
						"gradient before making the optimizer",
						p->name, shape_text(p->value.shape()), shape_text(p->grad.shape())));
		if (p->value.device().name() != device.name() || p->grad.device().name() != device.name())
			throw Error(fmt::format("parameter {} is on {} (gradient on {}) but {} is on {}; an optimizer "
						"works on one device",
						p->name, p->value.device().name(), p->grad.device().name(),
						parameters.front()->name, device.name()));
	}
	return device;
}

void check_parameters_match(const std::vector<std::string>& names, const std::vector<Parameter*>& parameters)
{
	if (parameters.size() != names.size())
		throw Error(fmt::format("optimizer stepped with {} parameters but made for {}", parameters.size(),
					names.size()));
	for (size_t i = 0; i < names.size(); ++i)
		if (parameters[i]->name != names[i])
			throw Error(fmt::format("optimizer stepped with parameter {} at position {} where it was made "
						"for {}",
						parameters[i]->name, i, names[i]));
}

} // namespace tower
