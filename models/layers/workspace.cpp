// A reusable per-batch buffer: memory is allocated for the largest shape asked for and reused.
#include "models/layers/workspace.h"

namespace tower {

const Tensor& Workspace::get(const Shape& shape, DType dtype, const Device& device)
{
	const bool same_place = storage_.dtype() == dtype && storage_.device().kind == device.kind &&
				storage_.device().index == device.index;
	if (current_.data() != nullptr && same_place && current_.shape() == shape)
		return current_;
	if (!same_place || storage_.data() == nullptr || storage_.numel() < shape_numel(shape))
		storage_ = Tensor::empty({shape_numel(shape)}, dtype, device);
	current_ = storage_.prefix(shape);
	return current_;
}

} // namespace tower
