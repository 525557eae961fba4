// How a replicated step turns its reduced gradient buckets into an update; chosen once per engine.
#pragma once

#include <cstddef>
#include <functional>

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
	// Whether the memory of the parameters and the optimizer state this rank uses is its own to
	// count (false where another rank of the node holds the copy it shares).
	virtual bool holds_variables() const { return true; }

	// Where the ranks of a node keep one copy of the parameters and the optimizer state (see
	// ShardedUpdate), only one of them may write it outside finish(). Each rank calls
	// write_variables(write) collectively: `write` runs once per copy (on every rank where each
	// has its own), and no rank reads the variables while it runs.
	virtual void write_variables(const std::function<void(bool writes)>& write) { write(true); }
	// Collective: runs `body` with every rank holding a copy of its own (which it may write, e.g.
	// in a broadcast), then the node keeps node rank 0's as its one copy again.
	virtual void with_own_variables(const std::function<void()>& body) { body(); }
};

} // namespace tower
