// The convolutional network: two conv 5x5 + ReLU + 2x2 pool blocks, then two linear layers.
#pragma once

#include <memory>

#include "models/sequential.h"

namespace tower {

struct CnnOptions {
	int64_t image_size = 28; // square, one channel
	int64_t channels1 = 32;
	int64_t channels2 = 64;
	int64_t hidden = 512;
	int64_t classes = 10;
	uint64_t seed = 0;
	DType precision = DType::f32; // compute type: f32, f16 or bf16
};

// conv1 (1 -> channels1, 5x5, pad 2) relu pool, conv2 (-> channels2) relu pool, flatten,
// fc1 (channels2 * (image_size/4)^2 -> hidden) relu, fc2 (-> classes).
std::unique_ptr<SequentialModel> make_cnn(const CnnOptions& options, const Device& device);

} // namespace tower
