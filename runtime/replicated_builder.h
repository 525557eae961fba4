// The replicated-mode builder: keeps every rank's tower in lock-step, one fused all-reduce at a time.
#pragma once

#include <chrono>
#include <memory>
#include <unordered_map>
#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/bucket_plan.h"
#include "models/model.h"
#include "models/named_tensor.h"
#include "optim/optimizer.h"
#include "runtime/comm_thread.h"
#include "runtime/topology.h"

namespace tower {

struct ReplicatedOptions {
	AllReduceMode mode = AllReduceMode::ring;
	ReduceOp reduce = ReduceOp::mean; // mean divides by the replicas of the group
	double fusion_mb = 25.0;          // bucket threshold; 0 gives one bucket per gradient
	bool overlap = true;              // all-reduce a bucket as soon as its gradients are ready
	GroupAssignment groups;           // empty: all ranks reduce together
	AllReduceOptions all_reduce;
};

struct StepStats {
	ForwardResult forward;        // this rank's loss and correct count
	double compute_s = 0;         // forward and backward on this rank
	double allreduce_s = 0;       // time inside all-reduce calls
	double hidden_fraction = 0;   // the share of all-reduce time that ran during backward
	size_t allreduce_bytes = 0;   // bytes all-reduced this step
};

class ReplicatedBuilder {
public:
	// Collective over the topology's world. Checks that every rank's gradient list matches rank
	// 0's (tower::AgreedError on every rank naming what differs), plans the fused buckets and
	// binds each parameter's gradient to its place inside one, then broadcasts rank 0's
	// parameters and optimizer state to every rank. `model` and `optimizer` must outlive it.
	ReplicatedBuilder(const Topology& topology, const Device& device, Model& model, Optimizer& optimizer,
			  const ReplicatedOptions& options);

	// One training step on this rank's batch: forward and backward, the fused all-reduce of
	// the gradients (overlapped with backward when asked), then the optimizer step with `lr`.
	StepStats step(const Tensor& images, const Tensor& labels, float lr);

	// Forward only, for evaluation; gradients and parameters are untouched.
	ForwardResult evaluate(const Tensor& images, const Tensor& labels);

	// The parameters, then the optimizer state: what the post-init broadcast sends.
	std::vector<NamedTensor> variables() const;
	std::vector<NamedTensor> parameter_tensors() const;

	// Collective: the parameters' 64-bit hash, equal on every rank, or tower::AgreedError
	// naming the ranks and the first tensor that differ.
	uint64_t check_replicas() const;

	const BucketPlan& plan() const { return plan_; }
	size_t bytes_per_step() const;
	int group_size() const { return all_reduce_->group_size(); }

private:
	void check_gradient_list() const;
	void bind_gradients_to_buckets();
	void on_gradient_ready(const Parameter& parameter);
	void reduce_bucket(size_t bucket);

	using Clock = std::chrono::steady_clock;
	struct Interval {
		Clock::time_point start, end;
	};

	const Topology& topology_;
	Device device_;
	Model& model_;
	Optimizer& optimizer_;
	ReplicatedOptions options_;
	std::vector<Parameter*> parameters_;
	std::unordered_map<const Parameter*, size_t> parameter_index_;
	BucketPlan plan_;
	std::vector<Tensor> bucket_storage_;
	std::vector<size_t> bucket_of_parameter_;
	std::vector<size_t> pending_in_bucket_;
	std::unique_ptr<AllReduce> all_reduce_;
	std::vector<Interval> reduce_intervals_; // written by whichever thread reduces; read after
	std::unique_ptr<CommThread> comm_thread_;
};

} // namespace tower
