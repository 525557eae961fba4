// A multilayer perceptron written out in float64 from its definition, to check the library's against.
#pragma once

#include <cstdint>
#include <vector>

namespace tower::test {

// Layers 0..L-1: z = a W^T + b with W [out, in] row-major, ReLU after every layer but the last;
// the loss is softmax cross-entropy averaged over the batch.
struct ReferenceMlp {
	std::vector<std::vector<double>> weights; // per layer, [out * in]
	std::vector<std::vector<double>> biases;  // per layer, [out]
	std::vector<int64_t> widths;              // inputs, then each layer's outputs

	struct Result {
		double loss = 0;
		int64_t correct = 0;
		std::vector<std::vector<double>> weight_grads, bias_grads; // d(loss)/d(parameter)
	};

	// Forward and backward over `rows` samples of `images` (rows x widths[0]) with `labels`.
	Result forward_backward(const std::vector<float>& images, const std::vector<int32_t>& labels) const;

	// Plain SGD (momentum 0) or heavy-ball momentum: buf = momentum * buf + g; p -= lr * buf.
	void step(const Result& gradients, double lr, double momentum);

	// The parameters in the model's order: layer 0 weight, layer 0 bias, layer 1 weight, ...
	std::vector<std::vector<double>> parameters() const;

private:
	std::vector<std::vector<double>> weight_buffers_, bias_buffers_; // momentum, made at the first step
};

// From the parameters of a built-in mlp as float vectors, in the model's order (fc1.weight,
// fc1.bias, fc2.weight, ...), and its input width.
ReferenceMlp reference_mlp_from(const std::vector<std::vector<float>>& parameters, int64_t inputs);

} // namespace tower::test
