// Gathers a rank's shard of samples into tensors on its device, reusing the same buffers each step.
#include "data/batch_assembler.h"

#include <algorithm>

#include "base/error.h"
#include "base/tensor/memory.h"

namespace tower {

BatchAssembler::BatchAssembler(const Dataset& dataset, int64_t batch, const Device& device)
    : dataset_(dataset), batch_(batch)
{
	if (batch <= 0)
		throw AgreedError(fmt::format("batch size {} must be positive", batch));
	batch_tensors_.images = Tensor::empty({batch, 1, dataset.rows, dataset.cols}, DType::f32, device);
	batch_tensors_.labels = Tensor::empty({batch}, DType::i32, device);
	if (device.is_cuda()) {
		staged_images_.resize(static_cast<size_t>(batch_tensors_.images.numel()));
		staged_labels_.resize(static_cast<size_t>(batch));
	}
}

void BatchAssembler::gather(std::span<const int64_t> indices, float* images, int32_t* labels) const
{
	const auto sample = static_cast<size_t>(dataset_.sample_size());
	for (size_t i = 0; i < indices.size(); ++i) {
		const int64_t s = indices[i];
		TOWER_CHECK(s >= 0 && s < dataset_.count, "sample index {} outside a dataset of {}", s, dataset_.count);
		const float* from = dataset_.images.data() + static_cast<size_t>(s) * sample;
		std::copy(from, from + sample, images + i * sample);
		labels[i] = dataset_.labels[static_cast<size_t>(s)];
	}
}

const Batch& BatchAssembler::assemble(std::span<const int64_t> indices)
{
	TOWER_CHECK_EQ(static_cast<int64_t>(indices.size()), batch_, "samples given to the batch assembler");
	Tensor& images = batch_tensors_.images;
	Tensor& labels = batch_tensors_.labels;
	if (!images.device().is_cuda()) {
		gather(indices, images.data_as<float>(), labels.data_as<int32_t>());
		return batch_tensors_;
	}
	gather(indices, staged_images_.data(), staged_labels_.data());
	copy_bytes(images.data(), images.device(), staged_images_.data(), Device{}, images.bytes());
	copy_bytes(labels.data(), labels.device(), staged_labels_.data(), Device{}, labels.bytes());
	return batch_tensors_;
}

} // namespace tower
