// The owner side of the async and sync-replicas strategies: a thread that takes gradients from
// workers as they come, applies updates to this owner's variable slices and hands out tokens.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "optim/optimizer.h"
#include "base/tensor/parameter.h"
#include "runtime/strategies/variable_averages.h"

namespace tower {

// Message tags on the two communicators: requests go to owners, replies to workers. Replies
// have a communicator of their own so that an owner thread receiving any tag never takes a
// reply meant for the worker on its own rank.
enum OwnerTag : int {
	tag_token = 1,  // worker -> chief: may I compute a gradient? (answered with the chief's values)
	tag_values = 2, // worker -> owner: your values once you have applied update min_step
	tag_push = 3,   // worker -> owner: a gradient slice and the update its values came from
	tag_bye = 4,    // worker -> owner: this worker is done
	tag_reply_head = 5,
	tag_reply_values = 6,
};

// Leads every push; the owner's gradient slice follows it in the same message.
struct PushHeader {
	int64_t tag = 0;     // the owner's update count when it sent the values the gradient used
	int64_t samples = 0;
	double loss = 0;
	// The learning rate the worker's step() was given: what the update takes where the run has
	// no schedule of its own (OwnerSetup::lr empty).
	double lr = 0;
	// 1 when the worker found an inf or NaN anywhere in its gradient: every owner drops its
	// slice alike, so no owner applies part of a bad gradient. Keeps the gradient 8-byte aligned.
	int64_t nonfinite = 0;
};

// Leads every reply: whether the worker may compute (0 once the run is over) and the update count.
struct ReplyHeader {
	int64_t granted = 0;
	int64_t step = 0;
};

enum class TokenAnswer { grant, wait, stop };

// What the chief knows when a worker asks for a token.
struct TokenBook {
	int64_t step = 0;              // updates applied so far
	int64_t target = 0;            // updates the run applies
	int64_t given_this_step = 0;   // tokens handed out since the last update
	int64_t given_total = 0;       // tokens handed out in the whole run
	int64_t taken_by_worker = 0;   // tokens this worker took since the last update
	int worker = 0;                // the asking worker's index
	int64_t in_flight = 0;         // tokens granted whose gradient has not arrived
	int64_t oldest_in_flight = 0;  // the smallest step among those tokens (when in_flight > 0)
};

// What distinguishes async training from sync-replicas on an owner.
class UpdateRule {
public:
	virtual ~UpdateRule() = default;
	// Updates the owners apply in a run planned as `planned_steps` lock-step updates.
	virtual int64_t target_updates(int64_t planned_steps) const = 0;
	// The planned step whose learning rate update number `update` takes.
	virtual int64_t planned_step(int64_t update) const = 0;
	// The chief's answer to a worker asking to compute a gradient.
	virtual TokenAnswer token(const TokenBook& book) const = 0;
	// Whether a gradient computed on the variables of update `tag` joins the update built at `step`.
	virtual bool fresh(int64_t tag, int64_t step) const = 0;
	// Gradients averaged (or summed) into one update, and the factor on their sum.
	virtual int gradients_per_update() const = 0;
	virtual float factor() const = 0;
	// A further factor on one gradient that arrives `staleness` updates after its values were sent.
	virtual float staleness_factor(int64_t) const { return 1.0f; }
};

// Counters one owner keeps; the chief's are the run's.
struct OwnerCounters {
	int64_t updates = 0;        // updates applied (the global step)
	int64_t received = 0;       // gradients that arrived
	int64_t applied = 0;        // gradients that went into an update
	int64_t dropped_stale = 0;  // gradients computed on variables of an update already applied
	int64_t dropped_nonfinite = 0; // gradients with an inf or NaN (the chief grants a token in their place)
	int64_t samples_applied = 0;
	int64_t staleness_sum = 0;  // over applied gradients: updates between fetch and push
	int64_t staleness_max = 0;
	double loss_sum = 0;        // of every gradient received
	// The owner thread's CPU time and its life: an idle owner must block, not spin a core.
	double cpu_s = 0, wall_s = 0;
	nlohmann::json to_json() const;
};

struct OwnerSetup {
	MPI_Comm requests = MPI_COMM_NULL, replies = MPI_COMM_NULL;
	bool chief = false;
	int workers = 0;
	int first_worker_rank = 0; // workers are world ranks first_worker_rank .. +workers-1
	float* values = nullptr;   // this owner's segment, the master copy
	int64_t count = 0;
	std::vector<Parameter>* owned = nullptr; // views of `values`; their grads are rebound here
	Optimizer* optimizer = nullptr;          // over *owned; null when the owner holds nothing
	VariableAverages* averages = nullptr;    // may be null
	int64_t* global_step = nullptr;          // where the update count lives (a checkpointed tensor)
	const UpdateRule* rule = nullptr;
	int64_t target = 0;
	// The learning rate of an update by the planned step it takes it from. Empty: each update
	// takes the rate its last gradient carried (PushHeader::lr), so a program whose workers run
	// a schedule of their own (a PyTorch LR scheduler) needs none here.
	std::function<float(int64_t planned_step)> lr;
	// Every owner: called on the owner thread right after each update it applies (its count,
	// and whether it was the run's last), while nothing else writes its variables; may be empty.
	std::function<void(int64_t update, bool last)> on_applied;
	// Chief only: called on the owner thread every `log_every` updates and after the last.
	int64_t log_every = 0;
	std::function<void(const nlohmann::json& window)> on_window;
};

// Serves until every worker said goodbye. run() is the thread's body; done() turns true after it.
class OwnerService {
public:
	explicit OwnerService(OwnerSetup setup);
	void run();
	bool done() const { return done_.load(); }
	const OwnerCounters& counters() const { return counters_; }

private:
	void handle(int tag, int source, int64_t min_step, const PushHeader* push, const float* gradient);
	void answer_token(int source);
	void reply(int source, bool granted);
	void take_gradient(int source, const PushHeader& h, const float* gradient);
	void drop_nonfinite(int source, const PushHeader& h);
	void apply_update();
	void serve_waiting();
	void maybe_log_window(bool last);
	float lr_of_update(int64_t update) const;

	OwnerSetup s_;
	std::vector<float> sum_; // the gradients of the update being built
	int accepted_ = 0;
	double carried_lr_ = 0; // the learning rate the update's last gradient carried
	double applied_lr_ = 0; // the learning rate of the last update applied
	int byes_ = 0;
	OwnerCounters counters_, window_start_;
	int64_t window_max_ = 0;
	double window_clock_ = 0;
	// Chief: tokens since the last update per worker, and requests waiting for an update.
	std::vector<int64_t> taken_;
	std::vector<int64_t> in_flight_; // per worker: the step of its granted token until its push; -1: none
	int64_t given_this_step_ = 0, given_total_ = 0;
	std::vector<int> waiting_tokens_;
	std::vector<std::pair<int, int64_t>> waiting_values_; // (source, min_step)
	std::atomic<bool> done_{false};
};

} // namespace tower
