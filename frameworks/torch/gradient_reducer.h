// The core of tower.torch's DistributedOptimizer: a torch module's gradients reduced by one of
// tower's strategies as autograd finalizes them; under replicated the wrapped torch optimizer
// applies them, under the others tower's owners (or, under local-sgd, each worker) do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "base/mpi/agree.h"
#include "runtime/distributed_optimizer.h"

namespace torch::autograd {
struct Node;
}

namespace tower::torch_adapter {

inline OptimizerConfig none_optimizer()
{
	OptimizerConfig none;
	none.name = "none";
	return none;
}

struct ReducerOptions {
	// Buckets of 4 MB rather than the library's 25: a model of a few tens of MB then travels in
	// several buckets, the last layers' while backward still computes the first ones (the
	// example GPT's 13 MB: 4 buckets, exposed communication 4.3 ms a step against 7.4 ms in one
	// bucket at 2 ranks on one host; docs/torch.md).
	ReducerOptions() { strategy.replicated.fusion_mb = 4.0; }

	// The strategy and its options (tower's own table): any of tower's strategies. Under
	// replicated the adapter never shards the update: the torch optimizer applies it on every rank.
	StrategyOptions strategy;
	// The update rule: `none` under replicated (the wrapped torch optimizer applies it); under the
	// other strategies the owners (local-sgd: each worker) apply this one (the front end derives it
	// from the torch optimizer's parameter group, with PyTorch's Adam arithmetic) and every rank
	// receives the new values (local-sgd: only at its syncs).
	OptimizerConfig optimizer = none_optimizer();
	// Horovod's backward_passes_per_step: the passes summed locally before one reduction.
	int backward_passes_per_step = 1;
	// async and sync-replicas: the run's length in lock-step steps, from which the chief plans
	// its tokens (sync-replicas: `steps` updates; async: `steps` times the workers' gradients).
	int64_t steps = 0;
	// Names this optimizer in errors and in the run agreement.
	std::string name;
	// What else every rank must hold alike: the wrapped optimizer's class and settings.
	std::vector<AgreedField> agreed;
	// What the front end found wrong on this rank ("" if nothing): an AgreedError on every rank,
	// so that no rank waits in a collective the others never reach.
	std::string problem;
};

// What the first worker announces to every rank before each step under parameter-server with
// ranks that only serve (which have no loop of their own to learn it from).
enum class Announced { end = 0, step = 1, checkpoint = 2 };

struct ReduceResult {
	bool skipped = false;  // a reduced gradient was inf or NaN: no rank may apply this step
	double grad_norm = 0;  // of the reduced gradients
	double allreduce_s = 0;
	double hidden_fraction = 0; // of the all-reduce time, the share that ran during backward
	size_t buckets = 0;
};

class GradientReducer {
public:
	// Collective over every rank: checks that the ranks agree on the options, the wrapped
	// optimizer and the parameters (names, shapes, dtypes, order), then gives every parameter
	// rank 0's values and hooks its gradient accumulator. Parameters must be float32 leaves on
	// the CPU that require gradients.
	GradientReducer(std::vector<std::pair<std::string, at::Tensor>> parameters, const ReducerOptions& options);
	// close(), if not closed yet.
	~GradientReducer();
	GradientReducer(const GradientReducer&) = delete;
	GradientReducer& operator=(const GradientReducer&) = delete;

	// Collective under replicated and parameter-server (and local-sgd's warm-up steps and syncs):
	// reports the gradients no hook reported (a parameter this rank did not use adds zeros), waits for every bucket, and checks the result. Parameters no rank used keep the
	// gradient torch left them (none, if they never had one), so the torch optimizer treats
	// them as it would alone. Where the owners apply the update (applies_update()), they apply it
	// with learning rate `lr` and every rank's parameters hold the new values on return.
	ReduceResult synchronize(float lr = 0.0f);
	bool applies_update() const { return applies_update_; }
	// Collective, on a rank that only serves variables (parameter-server with `ps_ranks` above
	// 0): the owners' side of one synchronize() of the workers, with the learning rate the first
	// worker passed. `end`, without stepping, once the workers closed their reducers (their
	// shutdown() ends the servers' loop). Under async and sync-replicas: waits for the run's end
	// (finish_run()) and returns `end`. `checkpoint`: the workers save the checkpoint of step
	// `*at` next (announce_checkpoint()), and the server joins the save instead of a step.
	Announced serve_step(int64_t* at = nullptr);
	// Collective, on every worker before a checkpoint is saved under parameter-server with
	// servers: tells the servers, whose serve() then joins the save. Nothing to do without servers.
	void announce_checkpoint(int64_t step);
	// async and sync-replicas, the detached strategies: whether the chief granted this worker
	// another step. The reducer fetched the owners' newest values for it already (at the first
	// call, then at the end of each synchronize()), so the next forward computes on them. The
	// run starts (the owner threads, the first token) at the first more() (or synchronize());
	// until then a checkpoint may be restored into the owners' variables. A backward pass before
	// it is an error.
	bool detached() const { return detached_; }
	bool more();
	// Detached: the owner threads started, and the run is not over: no rank may save or restore
	// now (the owners write their variables on threads of their own).
	bool running() const { return started_ && run_totals_.empty(); }
	// Collective, once no group of this worker has more (every rank calls it for every reducer,
	// in the order they were made; a server through serve_step()): waits for the owners to apply
	// the last gradients, brings the final values to every rank and returns the chief's totals
	// (updates, gradients applied and dropped, staleness) as JSON. Idempotent.
	std::string finish_run();
	// Collective, with `ema_decay` under an owner strategy: every rank's parameters take the
	// variables' moving averages (true) or the trained values back (false). Under async and
	// sync-replicas, after the run's end.
	void use_averages(bool averaged) { open().use_averages(averaged); }
	// Collective, under local-sgd (nothing under the others): every worker takes the one synced
	// model now (call it at the end of training); and the synced values swapped into the
	// parameters for an evaluation (true) and the worker's own back (false).
	void settle_replicas() { open().settle_replicas(); }
	void use_synced_values(bool synced) { open().use_synced_values(synced); }
	// What a checkpoint saves of these parameters under an owner strategy: the optimizer that holds
	// the owners' slices, moments and counters.
	Checkpointed& checkpointed() { return open(); }
	bool is_worker() const { return open().is_worker(); }
	// Among the ranks that train: this rank's place (-1 on a server) and their number.
	int worker_index() const { return open().worker_index(); }
	int workers() const { return open().workers(); }
	// A backward pass ran since the last synchronize(): zeroing the gradients now would race.
	bool gradients_pending() const { return in_step_; }
	size_t bucket_count() const;
	// Collective: the hash of the parameters, the same on every rank; tower::AgreedError on every
	// rank naming the ranks and the first parameter that differ when they do not hold the same.
	uint64_t check_replicas() const;
	// The hooks' entry (autograd's thread): parameter `index` was accumulated.
	void accumulated(size_t index);
	// Collective (the buckets may be memory the node's ranks share): removes the hooks, leaves
	// every gradient in memory of its own and frees the buckets. tower::torch_adapter::shutdown()
	// closes the open reducers in the order they were made. After MPI ended, the gradients that
	// were bucket views are dropped instead (their memory went with MPI). Idempotent.
	void close();
	bool closed() const { return optimizer_ == nullptr; }

private:
	void begin_step();
	void start_run();
	ReduceResult push(float lr);
	Announced announce(Announced what, float lr = 0.0f, int64_t step = 0);
	std::string serves_only() const;
	void bind(size_t index, bool keep_values);
	DistributedOptimizer& open() const;
	void restore_unused(std::vector<unsigned char>& flags);

	std::vector<std::string> names_;
	std::vector<at::Tensor> tensors_;  // the torch parameters
	std::vector<Parameter> parameters_; // the same memory, as tower sees it
	std::unique_ptr<DistributedOptimizer> optimizer_;
	std::vector<at::Tensor> bucket_views_; // each gradient's place in a fused bucket
	std::vector<at::Tensor> value_views_;  // each value's place in the strategy's memory, where it moved it
	std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
	std::vector<uintptr_t> hooks_;
	int passes_per_step_ = 1;
	bool applies_update_ = false;
	int servers_ = 0;          // ranks 0..servers_-1 only serve; the first worker announces each step
	bool run_ended_ = false;   // the workers announced their end
	bool detached_ = false;    // async or sync-replicas
	bool local_ = false;       // local-sgd: no collective between syncs
	bool more_ = false;        // detached: a token is granted, and its values fetched
	bool started_ = false;     // detached: start_run() ran
	int64_t planned_steps_ = 0; // detached: the run's length, for the chief's tokens
	std::string run_totals_;   // detached: finish_run()'s result, once run
	float announced_lr_ = 0;
	int64_t announced_step_ = 0;
	bool in_step_ = false;
	BackwardPass pass_;
	std::vector<int> passes_seen_; // per parameter, this step
	MPI_Comm flags_comm_ = MPI_COMM_NULL; // this reducer's own, for the per-step flags
	uint64_t closer_ = 0;
};

} // namespace tower::torch_adapter
