// The optimizer of programs whose framework applies the update itself.
#include "optim/no_update.h"

#include "optim/step_counter.h"
#include "optim/update.h"

namespace tower {

NoUpdate::NoUpdate(const std::vector<Parameter*>& parameters) : Optimizer(parameters), step_(make_step_counter(device_))
{
}

void NoUpdate::count_step()
{
	advance_step(device_, step_.tensor.data_as<int64_t>());
}

} // namespace tower
