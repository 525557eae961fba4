// Loss scaling for mixed precision: none, a static scale, or dynamic with one of two policies.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/tensor/named_tensor.h"

namespace tower {

enum class LossScaleMode { none, fixed, dynamic }; // fixed: the form static:VALUE

enum class LossScalePolicy {
	log2,   // scale 2^s; s grows by log2_inc per clean step and drops by log2_dec on overflow
	growth, // scale x growth_factor after growth_interval clean steps in a row, x backoff on overflow
};

struct LossScaleOptions {
	LossScaleMode mode = LossScaleMode::none;
	LossScalePolicy policy = LossScalePolicy::log2;
	float fixed_scale = 1.0f; // static:VALUE
	// log2 policy; all three are in log2 units.
	double log2_init = 64.0;
	double log2_inc = 0.0005;
	double log2_dec = 1.0;
	// growth policy: the scale stays a power of two, 2^16 to start.
	double growth_log2_init = 16.0;
	int64_t growth_interval = 2000;
};


// The loss scale of one training run. Its state lives in two host tensors, "loss_scale/log2"
// (f32 [1], the log2 of the current scale) and "loss_scale/clean_steps" (i64 [1], overflow-free
// steps in a row). The engine broadcasts them from rank 0 when it is constructed, as it does the
// parameters and optimizer state, and checkpoints save them. The scaler reads them at every
// call, so writing them restores it.
class LossScaler {
public:
	explicit LossScaler(const LossScaleOptions& options);

	// The factor the loss gradient is multiplied by (1 with mode none).
	float scale() const;
	double log2_scale() const;
	// After a step: `overflow` is whether any gradient was inf or NaN (agreed by every rank).
	void update(bool overflow);
	std::vector<NamedTensor> state();

	const LossScaleOptions& options() const { return options_; }

private:
	float& log2_ref() const { return *log2_.data_as<float>(); }
	int64_t& clean_ref() const { return *clean_steps_.data_as<int64_t>(); }

	LossScaleOptions options_;
	Tensor log2_;
	Tensor clean_steps_;
};

} // namespace tower
