// How a replicated step turns its reduced gradient buckets into an update; chosen once per builder.
#pragma once

#include <cstddef>

namespace tower {

// Two variants: every replica all-reduces whole buckets and updates everything (WholeUpdate), or
// the replicas of a node split the reduction and the update between them (ShardedUpdate).
class GradientUpdate {
public:
	virtual ~GradientUpdate() = default;
	// Collective: reduces bucket `b` as far as this variant needs it reduced.
	virtual void reduce(size_t b) = 0;
	// Collective, after reduce() of every bucket: multiplies the reduced gradients by `factor`,
	// measures their norm and, when every value is finite, applies one optimizer update with
	// `lr`. Returns whether the update was applied; the verdict is the same on every rank.
	virtual bool finish(float factor, float lr, double* grad_norm) = 0;
	virtual bool is_sharded() const = 0;
};

} // namespace tower
