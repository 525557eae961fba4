// The loss of the built-in models: softmax cross-entropy averaged over the batch.
#include "models/layers/softmax_xent.h"

#include "base/error.h"

namespace tower {

XentResult SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels)
{
	labels_ = labels;
	probs_ = probs_ws_.get(logits.shape(), logits.dtype(), logits.device());
	return ops_for(logits.device()).softmax_xent_forward(logits, labels, probs_);
}

const Tensor& SoftmaxCrossEntropy::backward(float loss_scale)
{
	TOWER_CHECK(probs_.data() != nullptr, "cross-entropy backward before any forward");
	dlogits_ = dlogits_ws_.get(probs_.shape(), probs_.dtype(), probs_.device());
	ops_for(probs_.device()).softmax_xent_backward(probs_, labels_, dlogits_, loss_scale);
	return dlogits_;
}

} // namespace tower
