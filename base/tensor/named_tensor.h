// A tensor with the name it is broadcast, checkpointed and reported under.
#pragma once

#include <string>

#include "base/tensor/tensor.h"

namespace tower {

struct NamedTensor {
	std::string name; // "fc1.weight", "fc1.weight/momentum", ...
	Tensor tensor;
};

} // namespace tower
