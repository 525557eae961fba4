// A multilayer perceptron written out in float64 from its definition, to check the library's against.
#include "test/runtime/reference_mlp.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tower::test {

namespace {

using Matrix = std::vector<double>; // row-major

// out[r][o] = b[o] + sum_i in[r][i] * w[o][i]
Matrix affine(const Matrix& in, int64_t rows, int64_t n_in, const Matrix& w, const Matrix& b, int64_t n_out)
{
	Matrix out(static_cast<size_t>(rows * n_out));
	for (int64_t r = 0; r < rows; ++r)
		for (int64_t o = 0; o < n_out; ++o) {
			double sum = b[static_cast<size_t>(o)];
			for (int64_t i = 0; i < n_in; ++i)
				sum += in[static_cast<size_t>(r * n_in + i)] * w[static_cast<size_t>(o * n_in + i)];
			out[static_cast<size_t>(r * n_out + o)] = sum;
		}
	return out;
}

} // namespace

ReferenceMlp::Result ReferenceMlp::forward_backward(const std::vector<float>& images,
						    const std::vector<int32_t>& labels) const
{
	const size_t layers = weights.size();
	const auto rows = static_cast<int64_t>(labels.size());
	// inputs[l]: what layer l reads (the images, then each hidden layer's ReLU output).
	std::vector<Matrix> inputs(layers);
	inputs[0].assign(images.begin(), images.end());
	Matrix logits;
	for (size_t l = 0; l < layers; ++l) {
		Matrix z = affine(inputs[l], rows, widths[l], weights[l], biases[l], widths[l + 1]);
		if (l + 1 == layers) {
			logits = std::move(z);
		} else {
			for (double& v : z)
				v = std::max(v, 0.0);
			inputs[l + 1] = std::move(z);
		}
	}

	Result out;
	const int64_t classes = widths[layers];
	Matrix dz(logits.size());
	for (int64_t r = 0; r < rows; ++r) {
		const double* z = &logits[static_cast<size_t>(r * classes)];
		const int32_t label = labels[static_cast<size_t>(r)];
		const auto best = std::max_element(z, z + classes) - z;
		out.correct += best == label ? 1 : 0;
		double top = z[best], sum = 0;
		for (int64_t k = 0; k < classes; ++k)
			sum += std::exp(z[k] - top);
		out.loss += std::log(sum) - (z[label] - top);
		// d(mean loss)/d(z) = (softmax - one-hot) / rows
		for (int64_t k = 0; k < classes; ++k)
			dz[static_cast<size_t>(r * classes + k)] =
				(std::exp(z[k] - top) / sum - (k == label ? 1.0 : 0.0)) / static_cast<double>(rows);
	}
	out.loss /= static_cast<double>(rows);

	out.weight_grads.resize(layers);
	out.bias_grads.resize(layers);
	for (size_t l = layers; l-- > 0;) {
		const int64_t n_in = widths[l], n_out = widths[l + 1];
		Matrix& dw = out.weight_grads[l];
		Matrix& db = out.bias_grads[l];
		dw.assign(static_cast<size_t>(n_out * n_in), 0.0);
		db.assign(static_cast<size_t>(n_out), 0.0);
		for (int64_t r = 0; r < rows; ++r)
			for (int64_t o = 0; o < n_out; ++o) {
				const double g = dz[static_cast<size_t>(r * n_out + o)];
				db[static_cast<size_t>(o)] += g;
				for (int64_t i = 0; i < n_in; ++i)
					dw[static_cast<size_t>(o * n_in + i)] += g * inputs[l][static_cast<size_t>(r * n_in + i)];
			}
		if (l == 0)
			break;
		// Through the weights, then through the ReLU that produced this layer's input.
		Matrix da(static_cast<size_t>(rows * n_in), 0.0);
		for (int64_t r = 0; r < rows; ++r)
			for (int64_t i = 0; i < n_in; ++i) {
				if (inputs[l][static_cast<size_t>(r * n_in + i)] <= 0.0)
					continue;
				double sum = 0;
				for (int64_t o = 0; o < n_out; ++o)
					sum += dz[static_cast<size_t>(r * n_out + o)] * weights[l][static_cast<size_t>(o * n_in + i)];
				da[static_cast<size_t>(r * n_in + i)] = sum;
			}
		dz = std::move(da);
	}
	return out;
}

void ReferenceMlp::step(const Result& gradients, double lr, double momentum)
{
	if (weight_buffers_.empty()) {
		for (size_t l = 0; l < weights.size(); ++l) {
			weight_buffers_.emplace_back(weights[l].size(), 0.0);
			bias_buffers_.emplace_back(biases[l].size(), 0.0);
		}
	}
	auto apply = [&](Matrix& p, const Matrix& g, Matrix& buf) {
		for (size_t i = 0; i < p.size(); ++i) {
			buf[i] = momentum * buf[i] + g[i];
			p[i] -= lr * buf[i];
		}
	};
	for (size_t l = 0; l < weights.size(); ++l) {
		apply(weights[l], gradients.weight_grads[l], weight_buffers_[l]);
		apply(biases[l], gradients.bias_grads[l], bias_buffers_[l]);
	}
}

std::vector<std::vector<double>> ReferenceMlp::parameters() const
{
	std::vector<std::vector<double>> out;
	for (size_t l = 0; l < weights.size(); ++l) {
		out.push_back(weights[l]);
		out.push_back(biases[l]);
	}
	return out;
}

ReferenceMlp reference_mlp_from(const std::vector<std::vector<float>>& parameters, int64_t inputs)
{
	if (parameters.empty() || parameters.size() % 2 != 0)
		throw std::invalid_argument("an mlp's parameters come in weight, bias pairs");
	ReferenceMlp m;
	m.widths.push_back(inputs);
	for (size_t i = 0; i < parameters.size(); i += 2) {
		const auto out = static_cast<int64_t>(parameters[i + 1].size());
		if (static_cast<int64_t>(parameters[i].size()) != out * m.widths.back())
			throw std::invalid_argument("an mlp weight does not match its bias and the previous width");
		m.weights.emplace_back(parameters[i].begin(), parameters[i].end());
		m.biases.emplace_back(parameters[i + 1].begin(), parameters[i + 1].end());
		m.widths.push_back(out);
	}
	return m;
}

} // namespace tower::test
