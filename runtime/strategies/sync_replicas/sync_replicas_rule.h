// The sync-replicas strategy's update rule and factory: each update averages the first N
// gradients computed on the current variables; later ones are dropped as stale, so up to
// workers - N slow workers are never waited for.
#pragma once

#include "runtime/strategies/detached/owner_service.h"

namespace tower {

// Tokens: after each update the chief hands out max(N, workers) tokens for the new global step,
// at most ceil(N / workers) to one worker, so with N <= workers each worker computes one gradient
// per update and with N > workers each contributes several. A worker's token carries the global
// step, so no worker computes ahead of it.
class SyncReplicasRule final : public UpdateRule {
public:
	SyncReplicasRule(int workers, int replicas_to_aggregate);
	int64_t target_updates(int64_t planned_steps) const override { return planned_steps; }
	int64_t planned_step(int64_t update) const override { return update; }
	TokenAnswer token(const TokenBook& book) const override;
	bool fresh(int64_t tag, int64_t step) const override { return tag == step; }
	int gradients_per_update() const override { return n_; }
	float factor() const override { return 1.0f / static_cast<float>(n_); }

private:
	int n_;
	int64_t tokens_per_step_, per_worker_;
};

} // namespace tower
