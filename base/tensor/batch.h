// A batch of named tensors, the input of a model: images and labels, token ids and targets, anything.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/tensor/named_tensor.h"

namespace tower {

// Every tensor's first dimension is the batch's samples. A model reads the names it knows
// ("images" and "labels" for the built-in classifiers) and may ignore the others.
struct Batch {
	std::vector<NamedTensor> tensors;

	// The tensor called `name`; tower::Error naming the batch's tensors when there is none.
	const Tensor& get(std::string_view name) const;
	// The samples in the batch: the first dimension of its first tensor (0 when empty).
	int64_t samples() const;
};

} // namespace tower
