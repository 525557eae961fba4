// Checks optimizers apply to the parameters they are made for and stepped with.
#pragma once

#include <string>
#include <vector>

#include "base/tensor/parameter.h"

namespace tower {

// The one device every parameter lives on. Throws tower::Error when the list is empty, a
// parameter is not f32, its gradient's shape differs from its value's, or devices differ.
Device parameters_device(const std::vector<Parameter*>& parameters);

// Throws tower::Error when `parameters` are not the ones named `names`, in order.
void check_parameters_match(const std::vector<std::string>& names, const std::vector<Parameter*>& parameters);

} // namespace tower
