// Async training: the owners apply every worker's gradient as soon as it arrives.
#pragma once

#include "runtime/owner_service.h"

namespace tower {

// Every gradient is one update, scaled by 1/workers when `scale` (so the effective learning rate
// matches a synchronous step's mean) or applied as it is. A run planned as P lock-step updates
// applies P * workers gradients, as many as the lock-step run would compute; the chief hands out
// exactly that many tokens, so none is computed in vain and none is dropped.
class AsyncRule final : public UpdateRule {
public:
	AsyncRule(int workers, bool scale) : workers_(workers), scale_(scale) {}
	int64_t target_updates(int64_t planned_steps) const override { return planned_steps * workers_; }
	int64_t planned_step(int64_t update) const override { return update / workers_; }
	TokenAnswer token(const TokenBook& book) const override;
	bool fresh(int64_t, int64_t) const override { return true; }
	int gradients_per_update() const override { return 1; }
	float factor() const override { return scale_ ? 1.0f / static_cast<float>(workers_) : 1.0f; }

private:
	int workers_;
	bool scale_;
};

} // namespace tower
