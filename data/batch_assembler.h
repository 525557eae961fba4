// The image classifiers' batches: a rank's shard of an image data set as images and labels on its device.
#pragma once

#include <cstdint>
#include <span>

#include "data/fashion_mnist.h"
#include "data/sample_batcher.h"

namespace tower {

struct ImageBatch {
	Tensor images; // f32 [B, 1, rows, cols]
	Tensor labels; // i32 [B]
};

// A SampleBatcher over a Dataset, for code that works with images and labels by name.
class BatchAssembler {
public:
	// `dataset` must outlive the assembler.
	BatchAssembler(const Dataset& dataset, int64_t batch, const Device& device);

	// Fills the batch with the samples at `indices` (exactly `batch` of them, each in range) and
	// returns it. The tensors are the same ones every call: the next call overwrites them.
	const ImageBatch& assemble(std::span<const int64_t> indices);

private:
	SampleBatcher batcher_;
	ImageBatch batch_;
};

} // namespace tower
