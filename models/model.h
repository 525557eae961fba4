// The interface every model implements, the built-in ones included.
#pragma once

#include <functional>
#include <vector>

#include "base/tensor/batch.h"
#include "base/tensor/parameter.h"

namespace tower {

// Called during backward as soon as a parameter's gradient is final for this step, so its
// communication can start while earlier layers are still differentiated.
using GradReadyFn = std::function<void(const Parameter&)>;

struct BackwardOptions {
	bool accumulate = false; // add to each Parameter::grad instead of overwriting it
	// The loss gradient is multiplied by this (in f32, before rounding to a 16-bit compute type)
	// so small gradients survive f16; the f32 gradients come out scaled by it.
	float loss_scale = 1.0f;
};

struct ForwardResult {
	float loss = 0.0f;    // the model's loss, a mean over the batch (the classifiers' cross-entropy)
	int64_t correct = -1; // classifiers: samples whose arg-max logit equals the label; -1 otherwise
};

class Model {
public:
	virtual ~Model() = default;

	// Every trainable parameter, in registration (forward) order; the pointers stay valid for
	// the model's life.
	virtual std::vector<Parameter*> parameters() = 0;

	// The loss of a batch of named tensors on the model's device (the built-in classifiers read
	// "images", f32 [B, 1, 28, 28], and "labels", i32 [B]). Keeps what backward needs. The loss is
	// f32 whatever the model's compute precision.
	virtual ForwardResult forward(const Batch& batch) = 0;
	// A classifier's batch by its two tensors.
	ForwardResult forward(const Tensor& images, const Tensor& labels)
	{
		return forward(Batch{{{"images", images}, {"labels", labels}}});
	}

	// Differentiates the last forward's loss times options.loss_scale into the f32
	// Parameter::grad (overwritten, or added to with options.accumulate). `on_ready` (may be
	// empty) is called once per parameter, in reverse layer order, right after its gradient is
	// complete. A model may allow one backward per forward (the GPT in f32 on the CPU: its GELU
	// layers use up what they kept, and refuse a second).
	virtual void backward(const GradReadyFn& on_ready, const BackwardOptions& options) = 0;

	// The type the layers compute in (f32, f16 or bf16); the master weights stay f32.
	virtual DType precision() const { return DType::f32; }
};

} // namespace tower
