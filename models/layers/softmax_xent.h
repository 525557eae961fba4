// The loss of the built-in models: softmax cross-entropy averaged over the batch.
#pragma once

#include "models/layers/workspace.h"
#include "models/ops.h"

namespace tower {

class SoftmaxCrossEntropy {
public:
	// logits: f32 [B, K]; labels: i32 [B]. Keeps the probabilities for backward.
	XentResult forward(const Tensor& logits, const Tensor& labels);
	// The gradient of the mean loss with respect to the last forward's logits.
	const Tensor& backward();

private:
	Tensor labels_;
	Tensor probs_;
	Tensor dlogits_;
	Workspace probs_ws_;
	Workspace dlogits_ws_;
};

} // namespace tower
