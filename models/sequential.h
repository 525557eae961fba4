// A model made of a chain of layers ending in softmax cross-entropy; the built-in models are these.
#pragma once

#include <memory>
#include <vector>

#include "models/layers/layer.h"
#include "models/layers/softmax_xent.h"
#include "models/layers/workspace.h"
#include "models/model.h"

namespace tower {

class SequentialModel : public Model {
public:
	// `precision` is the compute type (f32, f16 or bf16): activations and the layers' gradients
	// are kept in it, parameters and their gradients stay f32.
	SequentialModel(std::vector<std::unique_ptr<Layer>> layers, const Device& device,
			DType precision = DType::f32);

	std::vector<Parameter*> parameters() override;
	using Model::forward;
	// Reads the batch's "images" and "labels".
	ForwardResult forward(const Batch& batch) override;
	void backward(const GradReadyFn& on_ready, const BackwardOptions& options) override;

	const Device& device() const { return device_; }
	DType precision() const override { return precision_; }

private:
	std::vector<std::unique_ptr<Layer>> layers_;
	// first_trainable_: index of the first layer with parameters; layers up to it need no
	// input gradient, which saves the largest GEMM of an MLP's backward pass.
	size_t first_trainable_ = 0;
	SoftmaxCrossEntropy loss_;
	Device device_;
	DType precision_;
	Workspace input_ws_; // the images rounded to a 16-bit compute type
	bool have_forward_ = false;
};

} // namespace tower
