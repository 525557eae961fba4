// A named trainable tensor and its gradient, the unit the builder and optimizers work on.
#pragma once

#include <string>

#include "runtime/base/tensor.h"

namespace tower {

// Layers read and write `value` and `grad` through this object at every step and never keep raw
// pointers to their memory: the replicated-mode builder may rebind `grad` to a view inside a
// fused communication bucket (same shape, dtype and device) before training starts.
struct Parameter {
	std::string name; // "fc1.weight", "conv2.bias", ...
	Tensor value;
	Tensor grad;
};

} // namespace tower
