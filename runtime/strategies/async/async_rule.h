// The async strategy: its update rule (every gradient is one update, applied as it arrives) and
// its factory over the detached strategies' mechanics (detached_strategy.h).
#pragma once

#include "runtime/strategies/detached/owner_service.h"

namespace tower {

// Every gradient is one update, scaled by 1/workers when `scale` (so the effective learning rate
// matches a synchronous step's mean) or applied as it is. A run planned as P lock-step updates
// applies P * workers gradients, as many as the lock-step run would compute; the chief hands out
// exactly that many tokens, so none is computed in vain and none is dropped.
//
// Two remedies for staleness (docs/stragglers.md):
// - `async_staleness` scale (AsyncStaleness::scale; off by default): a gradient of staleness s
//   takes at most 1/(s + 1) of the rate (Zhang et al., "Staleness-aware Async-SGD", 2016). With
//   the 1/workers scale the factor is 1/max(workers, s + 1): a gradient no staler than a
//   round-robin turn keeps 1/workers.
// - max_staleness >= 0: the chief grants a token only when no gradient in flight could arrive
//   more than that many updates late (bounded staleness, as in stale-synchronous parallel); the
//   asking worker waits until enough of them have arrived. 0 is lock-step sequential SGD; -1,
//   no bound, is the seed's async.
struct AsyncStaleness {
	bool scale = false;
	int64_t max_staleness = -1;
};

class AsyncRule final : public UpdateRule {
public:
	AsyncRule(int workers, bool scale, AsyncStaleness staleness = {})
		: workers_(workers), scale_(scale), staleness_(staleness) {}
	int64_t target_updates(int64_t planned_steps) const override { return planned_steps * workers_; }
	int64_t planned_step(int64_t update) const override { return update / workers_; }
	TokenAnswer token(const TokenBook& book) const override;
	bool fresh(int64_t, int64_t) const override { return true; }
	int gradients_per_update() const override { return 1; }
	float factor() const override { return scale_ ? 1.0f / static_cast<float>(workers_) : 1.0f; }
	float staleness_factor(int64_t staleness) const override;

private:
	int workers_;
	bool scale_;
	AsyncStaleness staleness_;
};

} // namespace tower
