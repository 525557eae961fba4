// What the async and sync-replicas strategies share: workers that fetch variables from their
// owners, compute, and push gradients back without waiting for each other.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/strategies/detached/owner_service.h"
#include "runtime/strategies/detached_run.h"
#include "runtime/strategies/owned_variables.h"
#include "runtime/strategies/strategy.h"

namespace tower {

// The variables live on owners placed as the parameter-server strategy places them (every rank,
// or ranks 0..K-1 with --ps-ranks K); rank 0 is the chief, which hands out tokens and keeps the
// global step. Each owner runs an OwnerService on a thread of its own, so a colocated owner
// also trains. A worker step: ask the chief for a token (the reply carries the chief's values),
// fetch the other owners' values of at least that update, compute, (sleep when injected), push
// each owner its slice tagged with the update its values came from. Workers are not in
// lock-step: begin_step() and step() are not collective; start() and finish() bracket the training.
class DetachedStrategy : public Strategy, public DetachedRun {
	using Clock = std::chrono::steady_clock;

public:
	DetachedStrategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
			 const OptimizerConfig& optimizer, const StrategyOptions& options, std::unique_ptr<UpdateRule> rule,
			 std::string name);
	~DetachedStrategy() override;

	// Starts this rank's owner thread (when it owns variables). Not collective.
	void start(const DetachedPlan& plan) override;
	// Collective, after every worker's begin_step() returned false: waits for the owners, brings
	// the final variables to every worker, and returns the chief's totals and every owner's counters.
	nlohmann::json finish() override;
	int64_t gradients_per_update() const override { return rule_->gradients_per_update(); }

	bool is_worker() const override { return core_.is_worker(); }
	int worker_index() const override { return core_.worker_index(); }
	int workers() const override { return core_.workers(); }
	// A worker's token and the owners' values, into the parameters; false, without fetching,
	// once the chief has handed out the last token (this worker then says goodbye).
	bool begin_step() override;
	GradReadyFn begin_final_backward() override { return {}; }
	// Pushes each owner its slice of the gradients, tagged with the update the values came from,
	// with `request.lr` (which the owners use only where the plan has no schedule). A gradient
	// with an inf or NaN is marked so that every owner drops it (`skipped` in the result).
	StepStats step(const StepRequest& request) override;
	bool has_averages() const override { return core_.averages() != nullptr; }
	void use_averages(bool averaged) override;
	void reset_optimizer_state() override;
	// Each owner's share; a checkpoint takes it on the owner's thread right after an update
	// (DetachedPlan::on_applied), when it is exactly that update's.
	std::vector<NamedTensor> variables() override;
	bool saves_variables() const override { return core_.my_owner() >= 0; }
	DetachedRun* detached() override { return this; }
	// Collective, before start(): sends the owners' restored values to every worker.
	void variables_restored() override { publish(); }
	uint64_t check_replicas() const override;
	int64_t steps() const override { return core_.steps(); }
	StrategyDescription describe() const override;

	const Placement& placement() const { return core_.placement(); }
	const UpdateRule& rule() const { return *rule_; }
	// The global step of this worker's last token: the update its last gradient was computed at.
	int64_t last_token_step() const { return last_token_step_; }
	// Per owner, the update of the values this worker's last gradient was computed on.
	const std::vector<int64_t>& last_tags() const { return last_tags_; }

private:
	struct Segment {
		int rank = 0;
		int64_t offset = 0, count = 0; // in values_
	};
	bool fetch(std::vector<int64_t>* tags);
	void ask(size_t owner, int tag, const int64_t* min_step, ReplyHeader* head, MPI_Request* requests);
	// False when the gradient held an inf or NaN (the owners drop it).
	bool push(const std::vector<int64_t>& tags, const StepRequest& request);
	float* push_gradient(size_t owner);
	bool injecting() const;
	void say_goodbye();
	void publish();
	void to_model();
	// Where a worker keeps its fetched copy of an owner's values.
	float* fetched(size_t owner);

	int rank_;
	MPI_Comm world_;
	StrategyOptions options_;
	std::unique_ptr<UpdateRule> rule_;
	std::string name_;
	std::vector<float> values_; // owner-major on every rank; an owner's own segment is the master copy
	OwnedVariables core_;       // roles, placement; owned slices are views into values_
	std::vector<Segment> segments_;
	CommHandle requests_, replies_;
	// A worker that is also an owner fetches its own owner's values here, never into the master
	// copy: its owner thread keeps applying other workers' gradients to the master meanwhile.
	std::vector<float> own_fetched_;
	std::vector<std::vector<int64_t>> pushes_; // per owner: PushHeader then the gradient slice
	std::unique_ptr<OwnerService> owner_;
	std::thread owner_thread_;
	bool started_ = false, stopped_ = false;
	bool in_step_ = false;     // begin_step() granted a token that step() has not used yet
	double fetch_s_ = 0;       // the last begin_step()'s wait for the token and the values
	int64_t last_token_step_ = -1;
	int64_t pushed_ = 0;       // gradients this worker pushed
	std::vector<int64_t> last_tags_;
	std::vector<int64_t> tags_; // per owner, the update of the values the step under way computes on
};

// Collective: the factories of the two detached strategies (runtime/strategies/async/async_rule.cpp and
// runtime/strategies/sync_replicas/sync_replicas_rule.cpp).
std::unique_ptr<Strategy> make_async_strategy(const Topology& topology, const Device& device,
					      const ParameterSet& parameters, const OptimizerConfig& optimizer,
					      const StrategyOptions& options);
std::unique_ptr<Strategy> make_sync_replicas_strategy(const Topology& topology, const Device& device,
						      const ParameterSet& parameters, const OptimizerConfig& optimizer,
						      const StrategyOptions& options);

} // namespace tower
