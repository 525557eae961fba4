// The replicated strategy's step engine: keeps every rank's tower in lock-step, one fused all-reduce at a time.
#pragma once

#include <chrono>
#include <memory>
#include <unordered_map>
#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/fusion/bucket_plan.h"
#include "base/device/stream.h"
#include "base/tensor/named_tensor.h"
#include "optim/optimizer.h"
#include "runtime/strategies/fault_injection.h"
#include "runtime/strategies/comm_thread.h"
#include "runtime/strategies/replicated/gradient_update.h"
#include "runtime/strategies/strategy.h"
#include "base/mpi/topology.h"

namespace tower {

// Everything the engine is told: what every strategy shares, and the replicated strategy's own.
struct ReplicatedEngineOptions : GradientOptions, ReplicatedOptions {
	FaultInjection faults; // tests and demos: a NaN put in, a collective in a group of one
};

class ReplicatedEngine {
	using Clock = std::chrono::steady_clock;

public:
	// Collective over the topology's world. Checks that every rank's gradient list matches rank
	// 0's (tower::AgreedError on every rank naming what differs), plans the fused buckets and
	// binds each parameter's gradient to its place inside one, then broadcasts rank 0's
	// parameters and optimizer state to every rank. The parameters and `optimizer` must outlive it.
	ReplicatedEngine(const Topology& topology, const Device& device, const ParameterSet& parameters,
			 Optimizer& optimizer, const ReplicatedEngineOptions& options);
	// Gives the gradients (and, after a sharded update, the parameters and optimizer state)
	// memory of their own again: the parameters and the optimizer may outlive the engine.
	~ReplicatedEngine();
	ReplicatedEngine(const ReplicatedEngine&) = delete;
	ReplicatedEngine& operator=(const ReplicatedEngine&) = delete;

	// Before the last micro-batch's backward: with overlap, the callback that starts each
	// bucket's all-reduce as soon as its last gradient is final; empty without (step() then
	// reduces every bucket). Earlier micro-batches' backward passes only sum into the gradients.
	GradReadyFn begin_final_backward();

	// After the last backward: the fused all-reduce of the gradients (already running with
	// overlap), un-scaling by the loss scale and the micro-batch count, the non-finite check,
	// then the optimizer step, skipped on every rank when any reduced gradient is inf or NaN.
	StepStats step(const StepRequest& request);

	// The parameters, then the optimizer state (what the post-init broadcast sends), then the
	// step counter.
	std::vector<NamedTensor> variables() const;
	std::vector<NamedTensor> parameter_tensors() const;

	// Collective: the parameters' 64-bit hash, equal on every rank of this rank's replica group
	// (the whole world without subgroups), or tower::AgreedError naming the ranks and the first
	// tensor that differ.
	uint64_t check_replicas() const;

	const BucketPlan& plan() const { return plan_; }
	// The gradient bytes of one step (f32, padding included).
	size_t bytes_per_step() const;
	// What one step's all-reduce moves: bytes_per_step() in the compression type when compressing.
	size_t bytes_moved_per_step() const;
	int group_size() const { return all_reduce_->group_size(); }
	AllReduceMode mode() const { return all_reduce_->mode(); }
	int64_t steps_taken() const { return steps(); }
	// Whether steps split the update across the node's replicas (options.shard_update, where it
	// applies).
	bool update_is_sharded() const { return update_->is_sharded(); }
	// Whether this rank holds the memory of the parameters and optimizer state it uses (not so
	// on a node's ranks other than the first, under a sharded update).
	bool holds_variables() const { return update_->holds_variables(); }
	// Collective: what writes the parameters or the optimizer state between steps goes through
	// one of these, since a sharded update keeps one copy of them per node (see
	// GradientUpdate::write_variables and with_own_variables).
	void write_variables(const std::function<void(bool writes)>& write) { update_->write_variables(write); }
	void with_own_variables(const std::function<void()>& body) { update_->with_own_variables(body); }

private:
	void bind_gradients_to_buckets();
	void start_comm_thread();
	void on_gradient_ready(const Parameter& parameter);
	void reduce_bucket(size_t bucket);
	void submit_next_bucket();
	void wait_for_reported_buckets();
	void poison_if_injecting(const Parameter& parameter);

	struct Interval {
		Clock::time_point start, end;
	};

	const Topology& topology_;
	Device device_;
	Optimizer& optimizer_;
	ReplicatedEngineOptions options_;
	std::vector<Parameter*> parameters_;
	DType compute_type_;
	std::unordered_map<const Parameter*, size_t> parameter_index_;
	BucketPlan plan_;
	std::vector<Tensor> bucket_storage_;
	std::vector<Tensor> compressed_storage_; // per bucket, in options_.compress, when compressing
	// Steps taken, step_counter_name (i64 [1], host) among the variables: a checkpoint restores it.
	Tensor global_step_ = Tensor::zeros({1}, DType::i64, Device{});
	int64_t& steps() const { return *global_step_.data_as<int64_t>(); }
	bool poisoned_ = false;
	bool final_backward_ = false; // begin_final_backward() was called for the coming step()
	Clock::time_point backward_start_, last_gradient_ready_;
	std::vector<size_t> bucket_of_parameter_;
	std::vector<size_t> pending_in_bucket_;
	std::vector<bool> reported_; // per parameter, in the step under way
	size_t next_bucket_ = 0;     // the next bucket to submit, in plan order
	std::vector<std::string> report_problems_; // wrong reports in the step under way
	std::unique_ptr<AllReduce> all_reduce_;
	CommHandle replica_comm_; // the ranks that must hold identical parameters
	CommHandle report_comm_;  // the world's: whether every rank reported every gradient
	std::vector<Interval> reduce_intervals_; // written by whichever thread reduces; read after
	// Whole or node-sharded, chosen once; after all_reduce_: a sharded one lives in its memory.
	std::unique_ptr<GradientUpdate> update_;
	// On a GPU with overlap: the communication thread's stream, and per bucket the point of the
	// default stream after which its gradients are final. Before comm_thread_, which uses them.
	std::unique_ptr<SideStream> comm_stream_;
	std::vector<StreamMarker> bucket_ready_;
	std::unique_ptr<CommThread> comm_thread_;
};

} // namespace tower
