// A data set of samples, each made of named tensors: what the trainer, the sampler and evaluation read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/tensor/dtype.h"
#include "base/tensor/tensor.h"

namespace tower {

// One tensor of every sample: its name in the batch, its type, and its shape without the batch
// dimension ({1, 28, 28} for a Fashion-MNIST image, {} for its label, {129} for a text window).
struct SampleField {
	std::string name;
	DType dtype = DType::f32;
	Shape shape;
	int64_t bytes() const;
};

class SampleSet {
public:
	virtual ~SampleSet() = default;

	virtual int64_t size() const = 0;
	// The tensors every sample has, in the order copy_sample() fills them.
	virtual std::vector<SampleField> fields() const = 0;
	// Copies sample `index` (0 <= index < size()) into host memory: field f to out[f], which has
	// room for fields()[f].bytes().
	virtual void copy_sample(int64_t index, const std::vector<void*>& out) const = 0;
	// What the run-agreement check compares between ranks: the samples' count, shape and a
	// checksum of their contents, for people ("60000 samples of 28x28, checksum ...").
	virtual std::string describe() const = 0;
};

} // namespace tower
