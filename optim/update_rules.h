// The per-element update formulas, shared by the CPU loops and the CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>

// Lets the same inline formula compile as host code and, inside .cu files, as device code.
#ifdef __CUDACC__
#define TOWER_HOST_DEVICE __host__ __device__
#else
#define TOWER_HOST_DEVICE
#endif

namespace tower {

struct SgdCoeffs {
	float lr = 0.0f;
	float momentum = 0.0f; // 0: plain SGD, no buffer
	float weight_decay = 0.0f;
	bool nesterov = false;
};

struct AdamCoeffs {
	float lr = 0.0f;
	float beta1 = 0.9f;
	float beta2 = 0.999f;
	float epsilon = 1e-8f;
	float weight_decay = 0.0f;
	bool decoupled = false; // AdamW
	// PyTorch's arithmetic: epsilon added to the bias-corrected root of the second moment, and
	// AdamW's decay applied as a factor. Otherwise epsilon acts on the uncorrected root, which at
	// step 1 with beta2 0.999 makes it about 32 times larger in effect.
	bool pytorch_form = false;
};

TOWER_HOST_DEVICE inline void sgd_rule(float& p, float g, const SgdCoeffs& c)
{
	p -= c.lr * (g + c.weight_decay * p);
}

// buf <- mu * buf + g; the step is buf, or g + mu * buf with Nesterov. A zero buffer makes the
// first step equal to plain SGD.
TOWER_HOST_DEVICE inline void momentum_rule(float& p, float g, float& buf, const SgdCoeffs& c)
{
	const float d = g + c.weight_decay * p;
	buf = c.momentum * buf + d;
	p -= c.lr * (c.nesterov ? d + c.momentum * buf : buf);
}

// The step size with Adam's start-up bias removed at step t (1-based):
// lr * sqrt(1 - beta2^t) / (1 - beta1^t). Epsilon is added after this correction, so it acts on
// the uncorrected second moment.
TOWER_HOST_DEVICE inline float adam_step_size(const AdamCoeffs& c, int64_t t)
{
	const double td = static_cast<double>(t);
	const double b1 = 1.0 - pow(static_cast<double>(c.beta1), td);
	const double b2 = 1.0 - pow(static_cast<double>(c.beta2), td);
	return static_cast<float>(static_cast<double>(c.lr) * sqrt(b2) / b1);
}

TOWER_HOST_DEVICE inline void adam_rule(float& p, float g, float& m, float& v, const AdamCoeffs& c, float step_size)
{
	if (c.decoupled)
		p -= c.lr * c.weight_decay * p;
	else
		g += c.weight_decay * p;
	m = c.beta1 * m + (1.0f - c.beta1) * g;
	v = c.beta2 * v + (1.0f - c.beta2) * g * g;
	p -= step_size * m / (sqrtf(v) + c.epsilon);
}

// PyTorch's form at step t (c.pytorch_form): the step size lr / (1 - beta1^t), and the root of
// the second moment divided by sqrt(1 - beta2^t) before epsilon is added.
struct PytorchAdamStep {
	float size;
	float root_correction;
	float decay_factor; // AdamW: the weights are multiplied by 1 - lr * wd
};

TOWER_HOST_DEVICE inline PytorchAdamStep pytorch_adam_step(const AdamCoeffs& c, int64_t t)
{
	const double td = static_cast<double>(t);
	const double b1 = 1.0 - pow(static_cast<double>(c.beta1), td);
	const double b2 = 1.0 - pow(static_cast<double>(c.beta2), td);
	return {static_cast<float>(static_cast<double>(c.lr) / b1), static_cast<float>(sqrt(b2)),
		static_cast<float>(1.0 - static_cast<double>(c.lr) * static_cast<double>(c.weight_decay))};
}

TOWER_HOST_DEVICE inline void pytorch_adam_rule(float& p, float g, float& m, float& v, const AdamCoeffs& c,
						const PytorchAdamStep& s)
{
	if (c.decoupled)
		p *= s.decay_factor;
	else
		g += c.weight_decay * p;
	m = c.beta1 * m + (1.0f - c.beta1) * g;
	v = c.beta2 * v + (1.0f - c.beta2) * g * g;
	p += (-s.size * m) / (sqrtf(v) / s.root_correction + c.epsilon); // addcdiv's order
}

} // namespace tower
