// A named trainable tensor and its gradient, the unit the engine and optimizers work on.
#pragma once

#include <string>

#include "base/tensor/tensor.h"

namespace tower {

// Layers read and write `value` and `grad` through this object at every step and never keep raw
// pointers to their memory: the replicated engine may rebind `grad` to a view inside a
// fused communication bucket (same shape, dtype and device) before training starts.
struct Parameter {
	std::string name; // "fc1.weight", "conv2.bias", ...
	Tensor value;
	Tensor grad;
	// Optional: `value` rounded to a 16-bit compute type, kept current by whoever updates `value`
	// (the node-sharded update writes it as it updates), so 16-bit layers need not round the
	// weights again in every forward. Empty unless an updater keeps it; code that changes `value`
	// any other way must refresh or empty it.
	Tensor working;
};

} // namespace tower
