// The local-sgd strategy (local SGD and DiLoCo): every worker takes H steps of its own optimizer
// on its own data, then the workers average how far they moved and an outer optimizer applies it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/quantized/int8_mean.h"
#include "runtime/strategies/comm_thread.h"
#include "runtime/strategies/fault_injection.h"
#include "runtime/strategies/strategy.h"

namespace tower {

// Under overlap the outer all-reduce runs in pieces of this many values (1 MiB of f32, whole int8
// blocks): what the main thread sends meanwhile waits behind one piece on a slow link.
inline constexpr int64_t overlap_piece_values = 256 * 1024;

// Each worker keeps its parameters and its inner optimizer's state to itself; every worker also
// holds the synced values (the anchor, the one global model) and the outer optimizer's state,
// equal on every rank. A step applies the inner optimizer to this worker's gradient alone (no
// communication), or skips it on this worker when the gradient holds an inf or NaN; the first
// local_start steps average the gradients first (replicated steps, skipped on every rank alike
// when the mean is not finite), and the anchor follows the workers through them. Every H-th
// step is a sync: the pseudo-gradient anchor - parameters is averaged over the workers (f32, bf16
// or int8 blocks), the outer optimizer steps the anchor with it (skipped on every rank when the
// average is not finite), and the parameters restart from the anchor. With H = 1, outer SGD at
// rate 1 and an inner rule linear in the gradient this is the replicated strategy (mean).
//
// With `overlap` a sync starts the all-reduce of this block's pseudo-gradient on a thread of its
// own and goes on with the next block's inner steps; the next sync waits for it and applies its
// outer step then (one sync late). Each worker's parameters are the anchor plus its own progress
// over the last block, so no worker's steps are lost and the anchor's lag stays one block. A block
// starts where its worker stands (block_start_), not at the anchor, and its pseudo-gradient is
// the worker's own move over the block. A non-finite mean skips its outer step on every rank and
// every worker restarts from the anchor (the block after it is lost too). With `outer_delay` D
// the mean is waited for and applied D steps after its sync instead, the same way (each worker
// keeps its D steps since on top, and its block starts over at the new anchor; a non-finite mean
// loses only those D steps of it, and the block's sync comes at its usual step).
class LocalSgdStrategy final : public Strategy {
public:
	LocalSgdStrategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
			 const OptimizerConfig& optimizer, const StrategyOptions& options);
	~LocalSgdStrategy() override;

	int worker_index() const override { return rank_; }
	int workers() const override { return size_; }
	GradReadyFn begin_final_backward() override { return {}; }
	// Not collective, except the first local_start steps (a gradient all-reduce each) and every
	// H-th step after them, the sync.
	StepStats step(const StepRequest& request) override;
	void settle_replicas() override;
	void use_synced_values(bool synced) override;
	bool has_averages() const override { return false; }
	void use_averages(bool averaged) override;
	void reset_optimizer_state() override;
	// Rank 0: the anchor under the parameters' names, the outer state, the step counter and the
	// steps since the last sync; every worker: its own parameters and inner state, named
	// "local_sgd/worker<i>/...", which a checkpoint of another size lacks (they may be absent).
	std::vector<NamedTensor> variables() override;
	bool saves_variables() const override { return true; }
	// Collective: the shared state from rank 0; every worker's own state where the checkpoint had
	// the same workers, else every worker restarts from the anchor with fresh inner state. Resumed
	// into the warm-up, the workers settle here and take rank 0's inner state.
	void variables_restored() override;
	// Collective: the anchor, equal on every rank (without overlap the parameters too, right after
	// a sync).
	uint64_t check_replicas() const override;
	int64_t steps() const override { return *step_counter_.data_as<int64_t>(); }
	StrategyDescription describe() const override;

private:
	StepStats warm_up_step(const StepRequest& request, const std::vector<Tensor>& grads, StepStats stats);
	void inner_step(const StepRequest& request, const std::vector<Tensor>& grads, StepStats* stats);
	void copy_gradients(const std::vector<Tensor>& grads, bool in);
	void restore_state();
	void sync(StepStats* stats);
	void overlapped_sync(StepStats* stats);
	// Waits for the all-reduce in flight and applies its outer step; false where the mean was
	// not finite and the step was skipped.
	bool finish_pending(StepStats* stats);
	// settle_replicas under overlap: the pending outer step applied, each worker's progress since
	// its block started carried onto the new anchor; afterwards every block starts at the anchor.
	void drain_pending();
	// drain_pending's work, also `outer_delay` steps after a sync; false where the mean was not
	// finite (every worker restarted from the anchor).
	bool apply_pending(StepStats* stats);
	void compute_pseudo_gradient(const float* from);
	bool apply_outer_step(StepStats* stats);
	// The mean over the workers of pseudo_gradient_[at, at + n), in place.
	void average_pseudo_gradient(int64_t at, int64_t n);
	void restart_from_anchor();
	int64_t payload_bytes() const;
	std::vector<NamedTensor> shared_state();
	std::vector<NamedTensor> own_state();

	const Topology& topology_;
	int rank_, size_;
	LocalSgdOptions options_;
	std::vector<Parameter*> parameters_;
	std::unique_ptr<Optimizer> inner_;
	int64_t count_ = 0;       // elements of all parameters
	Tensor anchor_values_;    // f32 [count_]: the synced values, parameter after parameter
	Tensor pseudo_gradient_;  // f32 [count_]: anchor - parameters, then its mean over the workers
	Tensor low_;              // bf16 [count_] for a bf16 outer all-reduce
	std::vector<Parameter> anchor_; // views into anchor_values_, their gradients into pseudo_gradient_
	std::unique_ptr<Optimizer> outer_;
	std::unique_ptr<AllReduce> all_reduce_;
	std::unique_ptr<Int8Mean> int8_;
	Tensor step_counter_ = Tensor::zeros({1}, DType::i64, Device{});  // steps taken (skipped included)
	Tensor since_sync_ = Tensor::zeros({1}, DType::i64, Device{});    // inner steps since the last sync
	Tensor saved_workers_ = Tensor::zeros({1}, DType::i64, Device{}); // -1 until the first step
	int64_t syncs_ = 0, skipped_syncs_ = 0, skipped_inner_ = 0;
	std::vector<Tensor> own_values_; // the worker's parameters while the synced values are in
	FaultInjection faults_;
	// Overlap only: where this worker's block started (f32 [count_], the anchor without overlap);
	// 1 while a sync's mean waits to be applied (in flight, or arrived and saved in a checkpoint).
	Tensor block_start_;
	Tensor pending_ = Tensor::zeros({1}, DType::i64, Device{});
	double job_s_ = 0; // the last outer all-reduce's own time, written on the communication thread
	std::unique_ptr<CommThread> comm_thread_; // last: stops before the buffers its job reads go
};

// Collective: the factory (checks the options first).
std::unique_ptr<Strategy> make_local_sgd_strategy(const Topology& topology, const Device& device,
						  const ParameterSet& parameters, const OptimizerConfig& optimizer,
						  const StrategyOptions& options);

} // namespace tower
