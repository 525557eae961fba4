// A tensor with the name it is broadcast, checkpointed and reported under.
#pragma once

#include <string>

#include "base/tensor/tensor.h"

namespace tower {

struct NamedTensor {
	std::string name; // "fc1.weight", "fc1.weight/momentum", ...
	Tensor tensor;
	// A restore from a checkpoint that lacks it leaves it as it is (state of one worker that a
	// checkpoint of another size may not hold; its owner then decides what to do).
	bool may_be_absent = false;
};

} // namespace tower
