// The GAN's two networks, MLPs on tower's Linear layers with hand-written tanh, losses and R1 gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "models/layers/linear.h"

namespace gan {

constexpr int64_t latent_size = 64;
constexpr int64_t image_size = 28 * 28;

// z [B, 64] -> 256 (ReLU) -> 784 -> tanh: an image in [-1, 1].
class Generator {
public:
	Generator(int64_t hidden, uint64_t seed, tower::DType compute_type);
	std::vector<tower::Parameter*> parameters();
	// images f32 [B, 784]; keeps what backward needs.
	const tower::Tensor& forward(const tower::Tensor& z);
	// d_images f32 [B, 784] (already multiplied by the loss scale) into the parameters' gradients.
	void backward(const tower::Tensor& d_images, const tower::BackwardOptions& options,
		      const tower::GradReadyFn& on_ready);

private:
	tower::DType compute_type_;
	tower::Linear hidden_, out_;
	tower::Tensor z_low_, images_, d_low_;
};

// x [B, 784] -> 256 (ReLU) -> 1: a logit per image.
class Discriminator {
public:
	Discriminator(int64_t hidden, uint64_t seed, tower::DType compute_type);
	std::vector<tower::Parameter*> parameters();
	// logits f32 [B]; keeps what backward needs.
	std::vector<float> forward(const tower::Tensor& images);
	// d_logits (already multiplied by the loss scale) into the parameters' gradients; returns
	// d_images f32 [B, 784] when `input_grad` (the generator's step needs it).
	const tower::Tensor& backward(const std::vector<float>& d_logits, const tower::BackwardOptions& options,
				      const tower::GradReadyFn& on_ready, bool input_grad);
	// The lazy R1 penalty of the StyleGAN2 seed, weight/2 * mean over the batch of
	// ||d D(x) / d x||^2, for the last forward's images, and its gradient (times `scale`) into the
	// parameters' gradients. With ReLU the input gradient is W1^T (mask * w2), linear in the
	// weights where the masks hold, so the gradient needs no second backward pass.
	double r1(double weight, float scale, const tower::BackwardOptions& options, const tower::GradReadyFn& on_ready);

private:
	tower::DType compute_type_;
	tower::Linear hidden_, out_;
	tower::Tensor x_low_, d_logits_, d_images_;
	tower::Tensor hidden_out_; // the last forward's ReLU output, f32
};

// log(1 + e^x) without overflow, and the logistic function.
double softplus(double x);
double sigmoid(double x);

} // namespace gan
