// The optimizer step split across the replicas of one node: the node keeps one copy of the
// parameters and optimizer state, and each rank reduces, checks and updates one shard of it.
#pragma once

#include <functional>
#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/fusion/bucket_plan.h"
#include "base/tensor/parameter.h"
#include "optim/optimizer.h"
#include "runtime/strategies/replicated/gradient_update.h"

namespace tower {

// Where the replicas of a group share a node's memory, the node needs only one copy of the
// variables and the reduced gradient need not reach every replica: the node's ranks all read the
// parameters and the optimizer state from one copy in shared memory, rank r reduces shard r of
// each bucket, the node agrees on finiteness and the norm from per-shard partial sums, and rank r
// applies the update to shard r of that copy. Every rank ends the step seeing what the unsharded
// step would give it, the update's memory traffic and arithmetic are split over the node's ranks
// instead of repeated on each, nothing is copied between replicas, and the node holds the
// parameters and the optimizer state once instead of once per rank.
class ShardedUpdate final : public GradientUpdate {
public:
	// True when `all_reduce` can shard (its ranks share memory, more than one per node) and the
	// buckets are f32, as sharded steps need.
	static bool applies(AllReduce& all_reduce, const BucketPlan& plan);

	// Collective over the group. Every replica must hold the same values (rank 0's, as after the
	// engine's broadcast). Moves the parameters' values and the optimizer's per-parameter state
	// into one copy per node, shared by its ranks and laid out exactly like the gradient buckets
	// (same offsets), so one flat range covers the same elements of all three; node rank 0's
	// values fill it. `gradients` are the bucket storages (memory from `all_reduce`).
	// `parameters`, `optimizer` and `all_reduce` must outlive this object.
	// With a 16-bit `working` type (the model's compute type) the node also keeps one copy of the
	// weights rounded to it, each Parameter::working a view of it: the rank that updates a shard
	// rounds it there while it is still in the cache, instead of every rank rounding the whole
	// model in its next forward.
	ShardedUpdate(AllReduce& all_reduce, const BucketPlan& plan, const std::vector<Tensor>& gradients,
		      ReduceOp op, const std::vector<Parameter*>& parameters, Optimizer& optimizer,
		      DType working = DType::f32);
	// Gives every rank its own copy of the parameters and the state again, and empties the working
	// copies. Not collective (it may run while an error unwinds); the node's copy stays readable
	// until the all-reduce goes.
	~ShardedUpdate();
	ShardedUpdate(const ShardedUpdate&) = delete;
	ShardedUpdate& operator=(const ShardedUpdate&) = delete;

	// Collective: reduces this rank's shard of bucket `b` over the group.
	void reduce(size_t b) override;

	// Collective, after reduce() of every bucket: multiplies the shards by `factor`, sums their
	// squares across the node and, when every value is finite, applies one optimizer update with
	// `lr` to this rank's shard of the node's copy. Returns once every shard is updated, with
	// whether the update was applied; `grad_norm` is the norm of the whole (scaled) reduced
	// gradient.
	bool finish(float factor, float lr, double* grad_norm) override;
	bool is_sharded() const override { return true; }
	bool holds_variables() const override { return sharding_.node_rank() == 0; }

	// Node rank 0 writes the node's copy, and rounds it into the working copy, between node
	// barriers; the others only wait.
	void write_variables(const std::function<void(bool writes)>& write) override;
	void with_own_variables(const std::function<void()>& body) override;

private:
	Segment shard_of(size_t b) const;
	// Every tensor of bucket `b`'s members: the parameters' values, then each state slot's.
	std::vector<std::vector<Tensor*>> member_tensors(size_t b);
	// Collective: node rank 0's values (which must be its own, not views of the node's copy)
	// go into the node's copy, and every rank's tensors become views of it.
	void share();
	// Each rank's tensors get memory of their own, holding the node copy's values.
	void take_own();
	void update_shard(size_t b, float lr);
	// Rounds elements [first, first + length) of bucket `b`'s values into its working copy.
	void round_into_working(size_t b, size_t first, size_t length);

	NodeSharding& sharding_;
	const BucketPlan& plan_;
	std::vector<Tensor> gradients_;
	ReduceOp op_;
	std::vector<Parameter*> parameters_;
	Optimizer& optimizer_;
	size_t state_slots_ = 0;
	// The node's copy: per bucket, the values, then each state slot, laid out like the bucket.
	std::vector<std::vector<Tensor>> node_copy_;
	DType working_;
	std::vector<Tensor> working_copy_; // per bucket, in working_; empty when that is f32
	std::vector<double> reduced_squares_;     // per bucket: this rank's shard, summed by reduce()
};

} // namespace tower
