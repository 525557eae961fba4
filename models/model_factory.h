// Builds the built-in models by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "models/gpt.h"
#include "models/model.h"
#include "base/device/device.h"
#include "base/tensor/dtype.h"

namespace tower {

struct ModelConfig {
	std::string name = "mlp"; // "mlp", "cnn" or "gpt"
	int64_t hidden = 0;       // hidden width; 0 picks the model's default (mlp 1024, cnn 512)
	int64_t depth = 2;        // mlp only: the number of hidden layers
	uint64_t seed = 0;        // initial parameters depend on this alone
	// Compute type of activations and layer gradients: f32, f16 or bf16 (parameters, their
	// gradients and the loss stay f32).
	DType precision = DType::f32;
	// gpt only (models/gpt.h): blocks, residual width, attention heads, positions per window.
	int64_t layers = 4;
	int64_t width = 256;
	int64_t heads = 4;
	int64_t context = 128;
};

// The names make_model knows, for help texts: "mlp, cnn, gpt".
std::string known_model_names();

// The GPT's options of a config whose name is gpt.
GptOptions gpt_options(const ModelConfig& config);

// Throws tower::AgreedError (every rank holds the same config) naming the known models for an
// unknown name, or the bad option for a hidden width or depth out of range.
std::unique_ptr<Model> make_model(const ModelConfig& config, const Device& device);

} // namespace tower
