// The interface of a layer with a hand-written backward pass, the building block of built-in models.
#pragma once

#include <vector>

#include "models/model.h"
#include "base/tensor/parameter.h"
#include "base/tensor/tensor.h"

namespace tower {

struct BackwardArgs {
	bool need_input_grad = true; // false for the first layer with parameters: dx is never used
	bool accumulate = false;     // add parameter gradients into Parameter::grad
	const GradReadyFn* on_ready = nullptr;
};

class Layer {
public:
	virtual ~Layer() = default;

	// This layer's parameters in registration order (weight before bias).
	virtual std::vector<Parameter*> parameters() { return {}; }

	// The output for input `x`, in memory the layer owns and reuses at the next forward. The
	// layer keeps a handle on `x`, which must not change before backward.
	virtual const Tensor& forward(const Tensor& x) = 0;

	// Given the loss gradient of the last forward's output, writes the parameter gradients
	// (calling on_ready for each, in reverse registration order, as soon as it is final) and
	// returns the input gradient, or an undefined tensor when args.need_input_grad is false. A
	// layer may refuse a second backward after one forward (Linear with GELU's kept slope).
	virtual const Tensor& backward(const Tensor& dy, const BackwardArgs& args) = 0;
};

// Calls args.on_ready(p) when a callback was given.
inline void notify_ready(const BackwardArgs& args, const Parameter& p)
{
	if (args.on_ready != nullptr && *args.on_ready)
		(*args.on_ready)(p);
}

} // namespace tower
