// Driving async and sync-replicas from a program of its own: the strategies whose workers do not
// wait for each other ("detached" from lock-step), with owners that apply gradients as they come.
#pragma once

#include <cstdint>
#include <functional>

#include <nlohmann/json.hpp>

namespace tower {

// How a run drives the owners: the planned lock-step updates (the strategy's rule turns them into
// the updates it applies), their learning rates, and the chief's log windows.
struct DetachedPlan {
	int64_t planned_steps = 0;
	// The learning rate of each planned step. Empty: each update takes the rate its gradients'
	// step(lr) carried (the last gradient to join it), for workers that run their own schedule.
	std::function<float(int64_t planned_step)> lr;
	int64_t log_every = 0;
	std::function<void(const nlohmann::json& window)> on_window; // called on rank 0's owner thread
	// Called on every owner's thread right after each update it applies: where checkpoints are
	// taken (Checkpointer::save_owner_snapshot). May be empty.
	std::function<void(int64_t update, bool last)> on_applied;
};

// What DistributedOptimizer::detached() returns under async and sync-replicas (nullptr under the
// lock-step strategies). A program's loop:
//
//   tower::DetachedRun* run = opt.detached();
//   run->start(plan);                                   // every rank
//   while (opt.is_worker() && opt.begin_step()) {       // false once the chief's last token is out
//       forward, backward (opt.backward_pass()), opt.step(lr, {samples, loss});
//   }
//   nlohmann::json totals = run->finish();              // collective: every rank gets the final values
class DetachedRun {
public:
	virtual ~DetachedRun() = default;
	// Starts this rank's owner thread when it owns variables. Not collective.
	virtual void start(const DetachedPlan& plan) = 0;
	// Collective, after every worker's begin_step() returned false: waits for the owners, brings
	// the final variables to every worker, and returns the chief's totals ("updates",
	// "samples_applied", ...) and every owner's counters.
	virtual nlohmann::json finish() = 0;
	// Gradients that make one applied update: 1 under async, replicas-to-aggregate under
	// sync-replicas.
	virtual int64_t gradients_per_update() const = 0;
};

} // namespace tower
