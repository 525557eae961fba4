// A model made of a chain of layers ending in softmax cross-entropy; the built-in models are these.
#pragma once

#include <memory>
#include <vector>

#include "models/layers/layer.h"
#include "models/layers/softmax_xent.h"
#include "models/model.h"

namespace tower {

class SequentialModel : public Model {
public:
	SequentialModel(std::vector<std::unique_ptr<Layer>> layers, const Device& device);

	std::vector<Parameter*> parameters() override;
	ForwardResult forward(const Tensor& images, const Tensor& labels) override;
	void backward(const GradReadyFn& on_ready, bool accumulate) override;

	const Device& device() const { return device_; }

private:
	std::vector<std::unique_ptr<Layer>> layers_;
	// first_trainable_: index of the first layer with parameters; layers up to it need no
	// input gradient, which saves the largest GEMM of an MLP's backward pass.
	size_t first_trainable_ = 0;
	SoftmaxCrossEntropy loss_;
	Device device_;
	bool have_forward_ = false;
};

} // namespace tower
