// The multilayer perceptron: 784 -> hidden (x depth, ReLU) -> 10.
#pragma once

#include <memory>

#include "models/sequential.h"

namespace tower {

struct MlpOptions {
	int64_t inputs = 784;
	int64_t hidden = 1024;
	int64_t depth = 2; // hidden layers
	int64_t classes = 10;
	uint64_t seed = 0;
	DType precision = DType::f32; // compute type: f32, f16 or bf16
};

// Layers fc1 .. fc<depth+1>; each hidden layer has a ReLU after its bias (fused with the bias on
// CUDA, a pass of its own on the CPU, where the bias is added inside the GEMM).
std::unique_ptr<SequentialModel> make_mlp(const MlpOptions& options, const Device& device);

} // namespace tower
