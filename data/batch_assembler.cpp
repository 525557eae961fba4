// The image classifiers' batches: a rank's shard of an image data set as images and labels on its device.
#include "data/batch_assembler.h"

namespace tower {

BatchAssembler::BatchAssembler(const Dataset& dataset, int64_t batch, const Device& device)
	: batcher_(dataset, batch, device)
{
}

const ImageBatch& BatchAssembler::assemble(std::span<const int64_t> indices)
{
	const Batch& b = batcher_.assemble(indices);
	batch_ = {b.get("images"), b.get("labels")};
	return batch_;
}

} // namespace tower
