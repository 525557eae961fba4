// The GAN's two networks, MLPs on tower's Linear layers with hand-written tanh, losses and R1 gradient.
#include "networks.h"

#include <cmath>

#include "models/kernels/ops.h"

namespace gan {

using tower::DType;
using tower::Tensor;

namespace {

const tower::Device cpu; // the example trains on the CPU: its tanh and R1 loops read host memory

// `x` in the compute type, through `buffer` (kept by the caller for backward); x itself when f32.
const Tensor& in_type(const Tensor& x, DType type, Tensor& buffer)
{
	if (type == DType::f32)
		return x;
	buffer = Tensor::empty(x.shape(), type, cpu);
	tower::ops_for(cpu).cast(x, buffer, false);
	return buffer;
}

Tensor to_f32(const Tensor& x)
{
	Tensor out = Tensor::empty(x.shape(), DType::f32, cpu);
	tower::ops_for(cpu).cast(x, out, false);
	return out;
}

tower::BackwardArgs args(const tower::BackwardOptions& options, const tower::GradReadyFn& on_ready, bool input_grad)
{
	tower::BackwardArgs a;
	a.need_input_grad = input_grad;
	a.accumulate = options.accumulate;
	a.on_ready = &on_ready;
	return a;
}

} // namespace

double softplus(double x)
{
	return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

double sigmoid(double x)
{
	return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
}

Generator::Generator(int64_t hidden, uint64_t seed, DType compute_type)
	: compute_type_(compute_type), hidden_("G.hidden", latent_size, hidden, tower::Activation::relu, seed, cpu),
	  out_("G.out", hidden, image_size, tower::Activation::none, seed, cpu)
{
}

std::vector<tower::Parameter*> Generator::parameters()
{
	auto all = hidden_.parameters();
	for (tower::Parameter* p : out_.parameters())
		all.push_back(p);
	return all;
}

const Tensor& Generator::forward(const Tensor& z)
{
	const Tensor& pre = out_.forward(hidden_.forward(in_type(z, compute_type_, z_low_)));
	images_ = to_f32(pre);
	float* y = images_.data_as<float>();
	for (int64_t i = 0; i < images_.numel(); ++i)
		y[i] = std::tanh(y[i]);
	return images_;
}

void Generator::backward(const Tensor& d_images, const tower::BackwardOptions& options,
			 const tower::GradReadyFn& on_ready)
{
	Tensor d_pre = Tensor::empty(d_images.shape(), DType::f32, cpu);
	const float* dy = d_images.data_as<float>();
	const float* y = images_.data_as<float>();
	float* dx = d_pre.data_as<float>();
	for (int64_t i = 0; i < d_pre.numel(); ++i)
		dx[i] = dy[i] * (1.0f - y[i] * y[i]);
	const Tensor& d_hidden = out_.backward(in_type(d_pre, compute_type_, d_low_), args(options, on_ready, true));
	hidden_.backward(d_hidden, args(options, on_ready, false));
}

Discriminator::Discriminator(int64_t hidden, uint64_t seed, DType compute_type)
	: compute_type_(compute_type),
	  hidden_("D.hidden", image_size, hidden, tower::Activation::relu, seed, cpu),
	  out_("D.out", hidden, 1, tower::Activation::none, seed, cpu)
{
}

std::vector<tower::Parameter*> Discriminator::parameters()
{
	auto all = hidden_.parameters();
	for (tower::Parameter* p : out_.parameters())
		all.push_back(p);
	return all;
}

std::vector<float> Discriminator::forward(const Tensor& images)
{
	const Tensor& h = hidden_.forward(in_type(images, compute_type_, x_low_));
	hidden_out_ = to_f32(h);
	const Tensor logits = to_f32(out_.forward(h));
	const float* l = logits.data_as<float>();
	return {l, l + logits.numel()};
}

const Tensor& Discriminator::backward(const std::vector<float>& d_logits, const tower::BackwardOptions& options,
				      const tower::GradReadyFn& on_ready, bool input_grad)
{
	const Tensor d = Tensor::from_host(d_logits, {static_cast<int64_t>(d_logits.size()), 1}, cpu);
	const Tensor& d_hidden = out_.backward(in_type(d, compute_type_, d_logits_), args(options, on_ready, true));
	const Tensor& d_x = hidden_.backward(d_hidden, args(options, on_ready, input_grad));
	if (input_grad)
		d_images_ = to_f32(d_x);
	return d_images_;
}

double Discriminator::r1(double weight, float scale, const tower::BackwardOptions& options,
			 const tower::GradReadyFn& on_ready)
{
	// D(x) = w2 . relu(W1 x + b1) + b2, so dD/dx = W1^T v with v = mask * w2 (mask: the ReLU's
	// open units). The penalty P = weight/2 * mean_b ||W1^T v_b||^2 has
	//   dP/dW1 = weight/B * sum_b v_b u_b^T   and   dP/dw2 = weight/B * sum_b mask_b * (W1 u_b),
	// u_b = W1^T v_b, and nothing from the biases (the masks are piecewise constant in them).
	tower::Parameter& w1 = *hidden_.parameters()[0];
	tower::Parameter& b1 = *hidden_.parameters()[1];
	tower::Parameter& w2 = *out_.parameters()[0];
	tower::Parameter& b2 = *out_.parameters()[1];
	const int64_t batch = hidden_out_.dim(0), hidden = hidden_out_.dim(1);
	const float* W1 = w1.value.data_as<float>();
	const float* v2 = w2.value.data_as<float>();
	const float* h = hidden_out_.data_as<float>();
	std::vector<double> d_w1(static_cast<size_t>(hidden * image_size), 0.0), d_w2(static_cast<size_t>(hidden), 0.0);
	std::vector<double> v(static_cast<size_t>(hidden)), u(static_cast<size_t>(image_size));
	double penalty = 0;
	for (int64_t b = 0; b < batch; ++b) {
		for (int64_t k = 0; k < hidden; ++k)
			v[static_cast<size_t>(k)] = h[b * hidden + k] > 0 ? v2[k] : 0.0;
		std::fill(u.begin(), u.end(), 0.0);
		for (int64_t k = 0; k < hidden; ++k)
			if (v[static_cast<size_t>(k)] != 0.0)
				for (int64_t j = 0; j < image_size; ++j)
					u[static_cast<size_t>(j)] += W1[k * image_size + j] * v[static_cast<size_t>(k)];
		for (double x : u)
			penalty += x * x;
		for (int64_t k = 0; k < hidden; ++k) {
			if (h[b * hidden + k] <= 0)
				continue;
			double w1u = 0;
			for (int64_t j = 0; j < image_size; ++j) {
				w1u += W1[k * image_size + j] * u[static_cast<size_t>(j)];
				d_w1[static_cast<size_t>(k * image_size + j)] += v[static_cast<size_t>(k)] * u[static_cast<size_t>(j)];
			}
			d_w2[static_cast<size_t>(k)] += w1u;
		}
	}
	const double factor = weight / static_cast<double>(batch) * scale;
	const auto store = [&](tower::Parameter& p, const std::vector<double>* d) {
		float* g = p.grad.data_as<float>();
		for (int64_t i = 0; i < p.grad.numel(); ++i) {
			const auto value = d ? static_cast<float>((*d)[static_cast<size_t>(i)] * factor) : 0.0f;
			g[i] = options.accumulate ? g[i] + value : value;
		}
		if (on_ready)
			on_ready(p);
	};
	// Backward order, as the layers report: the last layer's bias first.
	store(b2, nullptr);
	store(w2, &d_w2);
	store(b1, nullptr);
	store(w1, &d_w1);
	return weight / 2 * penalty / static_cast<double>(batch);
}

} // namespace gan
