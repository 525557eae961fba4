// tower's watched waits: spin briefly, then yield, then sleep, and name a stall (the collectives'
// and barriers' waits; a few plain blocking MPI calls, e.g. MPI_Allgather, are not watched).
#pragma once

// How to wire a wait in (one edit per wait):
//
//   MPI_Request r;
//   TOWER_MPI(MPI_Iallreduce(..., comm, &r));          // never the blocking MPI_Allreduce
//   tower::wait_request(r, {"loss all-reduce", comm});
//
//   tower::wait_until([&] { return flag.load() >= epoch; }, {"node barrier", node_comm});
//
// A WaitSite says what is waited on and among which ranks. After stall_limits().warn_s a waiting
// rank prints, once, how long it has waited, where (operation, bucket or variable, step) and
// which ranks have not arrived; after abort_s (0: never) it takes the job down through
// tower::fatal with the same report. The wait costs nothing extra while it is short: the first
// few thousand polls touch neither the clock nor the arrival table, and only a wait past 1 ms
// writes its entry there. See docs/run-safety.md for the back-off and what it costs.

#include <cstdint>
#include <functional>
#include <vector>

#include <mpi.h>

namespace tower {

struct WaitSite {
	const char* operation = "wait"; // a literal: "ring all-reduce", "node barrier", "owner reduce"
	MPI_Comm comm = MPI_COMM_NULL;  // the ranks taking part; null: not known
	int peer = -1;                  // point-to-point: the one rank of `comm` this waits for
	const char* unit = nullptr;     // what `index` counts: "bucket", "variable", "chunk"; null: none
	int64_t index = -1;
};

struct StallLimits {
	double warn_s = 60;   // print who has not arrived after this long
	double abort_s = 600; // abort the job after this long; 0: never
};

// Process-wide; set once at start-up (tower train's --stall-warn, --stall-abort), read by every
// wait. Throws tower::AgreedError for a negative value or a warning after the abort.
void set_stall_limits(const StallLimits& limits);
StallLimits stall_limits();

// What this thread's waits serve while it lives, for the reports: "bucket 3" of a step, a
// variable. Nested contexts restore the outer one.
class WaitContext {
public:
	WaitContext(const char* unit, int64_t index);
	~WaitContext();
	WaitContext(const WaitContext&) = delete;
	WaitContext& operator=(const WaitContext&) = delete;

private:
	const char* outer_unit_;
	int64_t outer_index_;
};

// The training step this process is in, for the reports (the trainer sets it each step).
void set_wait_step(int64_t step);

// Waits for `request` to complete (MPI_Test in the watched loop).
void wait_request(MPI_Request& request, const WaitSite& site);
// Waits for every request; completed ones become MPI_REQUEST_NULL.
void wait_requests(std::vector<MPI_Request>& requests, const WaitSite& site);

// Ranks of site.comm that have not arrived, when the waiter knows exactly (a flag barrier reads
// the counters); empty function: found from the peer or the host's arrival table.
using MissingRanks = std::function<std::vector<int>()>;

// For this thread from now on: its waits have time to spare and share a core with the rank's
// compute (local-sgd's outer all-reduce, run during the next inner steps): they poll a few times,
// then sleep in slices of 50 us growing to 1 ms instead of spinning and yielding, so the compute
// keeps the core. Open MPI's progress happens in the polls, which is enough where the wait has
// whole steps to finish in. They stay out of the host's arrival table, which names the rank's
// main-thread wait, and still warn of and abort a stall.
void set_background_waits(bool background);

namespace detail {
constexpr int quiet_polls = 2000; // polls before the clock is read: a fast wait costs only these
int quiet_polls_now();            // quiet_polls, or a few on a thread of background waits
// How a wait gives the core away once its quiet polls are spent.
enum class BackOff {
	yield_then_sleep, // a peer is about to arrive: yield for a while, then sleep
	drives_progress,  // `done` advances the awaited operation (MPI_Test): sleep later and shorter
	idle,             // a thread with nothing else to do (an owner between messages): sleep at once
};
void watched_loop(const std::function<bool()>& done, const WaitSite& site, const MissingRanks& missing,
		  BackOff back_off = BackOff::yield_then_sleep);
} // namespace detail

// Waits until `done()` returns true. `done` is polled from this thread only. For a condition
// that needs polling to advance (an MPI request), use wait_request, which backs off more gently.
template <typename Done> void wait_until(Done&& done, const WaitSite& site, const MissingRanks& missing = {})
{
	for (int i = 0; i < detail::quiet_polls_now(); ++i)
		if (done())
			return;
	detail::watched_loop(std::function<bool()>(std::ref(done)), site, missing);
}

// Like wait_until, for a thread that waits most of its life (a variable owner between messages):
// it sleeps instead of yielding, so an idle owner costs a few percent of a core, and it keeps out
// of the host's arrival table, which names the rank's main-thread waits.
void wait_idle(const std::function<bool()>& done, const WaitSite& site);

// What a stall report says, for the messages and for tests: "waited 3.0 s in ... ; not arrived: ...".
std::string describe_stall(const WaitSite& site, double waited_s, const MissingRanks& missing = {});

} // namespace tower
