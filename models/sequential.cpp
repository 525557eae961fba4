// A model made of a chain of layers ending in softmax cross-entropy; the built-in models are these.
#include "models/sequential.h"

#include "models/kernels/ops.h"
#include "base/error.h"

namespace tower {

SequentialModel::SequentialModel(std::vector<std::unique_ptr<Layer>> layers, const Device& device, DType precision)
	: layers_(std::move(layers)), device_(device), precision_(precision)
{
	TOWER_CHECK(precision == DType::f32 || precision == DType::f16 || precision == DType::bf16,
		    "a model computes in f32, f16 or bf16, not {}", dtype_name(precision));
	first_trainable_ = layers_.size();
	for (size_t i = 0; i < layers_.size(); ++i)
		if (!layers_[i]->parameters().empty()) {
			first_trainable_ = i;
			break;
		}
}

std::vector<Parameter*> SequentialModel::parameters()
{
	std::vector<Parameter*> all;
	for (auto& layer : layers_)
		for (Parameter* p : layer->parameters())
			all.push_back(p);
	return all;
}

ForwardResult SequentialModel::forward(const Batch& batch)
{
	const Tensor& images = batch.get("images");
	const Tensor& labels = batch.get("labels");
	TOWER_CHECK(images.dtype() == DType::f32 && labels.dtype() == DType::i32,
		    "a model takes f32 images and i32 labels, got {} and {}", dtype_name(images.dtype()),
		    dtype_name(labels.dtype()));
	TOWER_CHECK(images.device().kind == device_.kind && labels.device().kind == device_.kind &&
			    images.device().index == device_.index && labels.device().index == device_.index,
		    "the model lives on {} but images are on {} and labels on {}", device_.name(),
		    images.device().name(), labels.device().name());
	TOWER_CHECK(images.rank() >= 1 && labels.rank() == 1 && labels.dim(0) == images.dim(0),
		    "images {} and labels {} disagree on the batch size", shape_text(images.shape()),
		    shape_text(labels.shape()));
	// The layers compute in their input's type, so rounding the images once sets the precision
	// of the whole chain.
	const Tensor* x = &images;
	if (precision_ != DType::f32) {
		const Tensor& low = input_ws_.get(images.shape(), precision_, device_);
		ops_for(device_).cast(images, low, false);
		x = &low;
	}
	for (auto& layer : layers_)
		x = &layer->forward(*x);
	const XentResult r = loss_.forward(*x, labels);
	have_forward_ = true;
	return {r.loss, r.correct};
}

void SequentialModel::backward(const GradReadyFn& on_ready, const BackwardOptions& options)
{
	TOWER_CHECK(have_forward_, "backward needs a forward first");
	BackwardArgs args;
	args.accumulate = options.accumulate;
	args.on_ready = &on_ready;
	const Tensor* dy = &loss_.backward(options.loss_scale);
	// Layers before the first one with parameters are never differentiated.
	for (size_t i = layers_.size(); i-- > first_trainable_;) {
		args.need_input_grad = i > first_trainable_;
		dy = &layers_[i]->backward(*dy, args);
	}
}

} // namespace tower
