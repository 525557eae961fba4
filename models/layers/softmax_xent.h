// The loss of the built-in models: softmax cross-entropy averaged over the batch.
#pragma once

#include "models/layers/workspace.h"
#include "models/kernels/ops.h"

namespace tower {

class SoftmaxCrossEntropy {
public:
	// logits: [B, K] in the compute type; labels: i32 [B]. Keeps the probabilities (in the
	// logits' type) for backward; the loss is computed in f32.
	XentResult forward(const Tensor& logits, const Tensor& labels);
	// The gradient of loss_scale x the mean loss with respect to the last forward's logits, in
	// the logits' type (scaled in f32 before rounding).
	const Tensor& backward(float loss_scale);

private:
	Tensor labels_;
	Tensor probs_;
	Tensor dlogits_;
	Workspace probs_ws_;
	Workspace dlogits_ws_;
};

} // namespace tower
