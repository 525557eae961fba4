// libFuzzer target: --loss-scale text, and the scaler built from what it accepts.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "runtime/options/names.h"
#include "optim/loss_scale.h"
#include "base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	const std::string_view text(reinterpret_cast<const char*>(data), size);
	try {
		const tower::LossScaleOptions o = tower::parse_loss_scale(text);
		// Accepted: a static value is a positive finite number (the parser's promise, not left to
		// the scaler's own check), the scaler takes it, and its scale is one too.
		if (o.mode == tower::LossScaleMode::fixed && !(std::isfinite(o.fixed_scale) && o.fixed_scale > 0))
			std::abort();
		const tower::LossScaler scaler(o);
		if (!(std::isfinite(scaler.scale()) && scaler.scale() > 0))
			std::abort();
	} catch (const tower::Error&) {
	}
	return 0;
}
