// The optimizer step split across the replicas of one node: each rank reduces, checks and updates
// one shard of the gradients, parameters and optimizer state, and writes it into every replica.
#pragma once

#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/bucket_plan.h"
#include "runtime/base/parameter.h"
#include "optim/optimizer.h"
#include "runtime/gradient_update.h"

namespace tower {

// Where the replicas of a group share a node's memory, the reduced gradient need not reach every
// replica: rank r reduces shard r of each bucket, and the node agrees on finiteness and the norm
// from per-shard partial sums; then rank r applies the update to shard r of the parameters and
// the optimizer state and copies the result into every replica on the node. Each replica ends
// the step holding what the unsharded step would give it, and the update's memory traffic and
// arithmetic are split over the node's ranks instead of repeated on each.
class ShardedUpdate final : public GradientUpdate {
public:
	// True when `all_reduce` can shard (its ranks share memory, more than one per node) and the
	// buckets are f32, as sharded steps need.
	static bool applies(AllReduce& all_reduce, const BucketPlan& plan);

	// Collective over the group. Moves the parameters' values and the optimizer's per-parameter
	// state into memory from `all_reduce` laid out exactly like the gradient buckets (same
	// offsets), keeping their values, so one flat range covers the same elements of all three.
	// `gradients` are the bucket storages (memory from `all_reduce` too). `parameters`,
	// `optimizer` and `all_reduce` must outlive this object.
	ShardedUpdate(AllReduce& all_reduce, const BucketPlan& plan, const std::vector<Tensor>& gradients,
		      ReduceOp op, const std::vector<Parameter*>& parameters, Optimizer& optimizer);
	// Moves the parameters and the state back into memory of their own.
	~ShardedUpdate();
	ShardedUpdate(const ShardedUpdate&) = delete;
	ShardedUpdate& operator=(const ShardedUpdate&) = delete;

	// Collective: reduces this rank's shard of bucket `b` over the group.
	void reduce(size_t b) override;

	// Collective, after reduce() of every bucket: multiplies the shards by `factor`, sums their
	// squares across the node and, when every value is finite, applies one optimizer update with
	// `lr` to this rank's shards and copies them into the node's other replicas. Returns whether
	// the update was applied; `grad_norm` is the norm of the whole (scaled) reduced gradient.
	bool finish(float factor, float lr, double* grad_norm) override;
	bool is_sharded() const override { return true; }

private:
	Segment shard_of(size_t b) const;
	// Collective: memory from the all-reduce shaped like bucket `b`, holding `tensors`' values at
	// their members' offsets, which are rebound to views of it.
	Tensor move_into_bucket_layout(size_t b, const std::vector<Tensor*>& tensors);
	void update_block(size_t b, size_t first, size_t length, float lr);

	AllReduce& all_reduce_;
	NodeSharding& sharding_;
	const BucketPlan& plan_;
	std::vector<Tensor> gradients_;
	ReduceOp op_;
	std::vector<Parameter*> parameters_;
	Optimizer& optimizer_;
	std::vector<Tensor> values_;              // per bucket
	std::vector<std::vector<Tensor>> states_; // per bucket, per state slot
	std::vector<double> reduced_squares_;     // per bucket: this rank's shard, summed by reduce()
};

} // namespace tower
