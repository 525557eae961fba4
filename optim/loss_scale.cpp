// Loss scaling for mixed precision: none, a static scale, or dynamic with one of two policies.
#include "optim/loss_scale.h"

#include <cmath>
#include <string>

#include "base/error.h"

namespace tower {

LossScaler::LossScaler(const LossScaleOptions& options)
	: options_(options), log2_(Tensor::empty({1}, DType::f32, Device{})),
	  clean_steps_(Tensor::zeros({1}, DType::i64, Device{}))
{
	if (options.mode == LossScaleMode::fixed && !(std::isfinite(options.fixed_scale) && options.fixed_scale > 0.0f))
		throw AgreedError(fmt::format("a static loss scale must be positive and finite, not {}",
					      options.fixed_scale));
	TOWER_CHECK(options.growth_interval > 0, "the growth interval is {} but must be positive",
		    options.growth_interval);
	switch (options.mode) {
	case LossScaleMode::none:
		log2_ref() = 0.0f;
		break;
	case LossScaleMode::fixed:
		log2_ref() = std::log2(options.fixed_scale);
		break;
	case LossScaleMode::dynamic:
		log2_ref() = static_cast<float>(options.policy == LossScalePolicy::log2 ? options.log2_init
											 : options.growth_log2_init);
		break;
	}
}

float LossScaler::scale() const
{
	switch (options_.mode) {
	case LossScaleMode::none:
		return 1.0f;
	case LossScaleMode::fixed:
		return options_.fixed_scale; // exact, whether or not it is a power of two
	case LossScaleMode::dynamic:
		break;
	}
	return std::exp2(log2_ref());
}

double LossScaler::log2_scale() const
{
	if (options_.mode == LossScaleMode::dynamic)
		return log2_ref();
	return std::log2(static_cast<double>(scale()));
}

void LossScaler::update(bool overflow)
{
	if (options_.mode != LossScaleMode::dynamic)
		return;
	float& s = log2_ref();
	int64_t& clean = clean_ref();
	clean = overflow ? 0 : clean + 1;
	if (options_.policy == LossScalePolicy::log2) {
		// The state is the exponent, kept in f32 as the seed's optimizer keeps it.
		s = static_cast<float>(s + (overflow ? -options_.log2_dec : options_.log2_inc));
		return;
	}
	// growth: powers of two, so the exponent moves by whole steps and stays exact.
	if (overflow) {
		s -= 1.0f;
	} else if (clean >= options_.growth_interval) {
		s += 1.0f;
		clean = 0;
	}
}

std::vector<NamedTensor> LossScaler::state()
{
	return {{"loss_scale/log2", log2_}, {"loss_scale/clean_steps", clean_steps_}};
}

} // namespace tower
