// tower's watched waits: spin briefly, then yield, then sleep, and name a stall (the collectives'
// and barriers' waits; a few plain blocking MPI calls, e.g. MPI_Allgather, are not watched).
#include "base/watchdog/watched_wait.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/watchdog/arrival_table.h"
#include "base/error.h"
#include "base/fatal.h"
#include "base/field_spelling.h"
#include "base/mpi/mpi_check.h"
#include "base/clock.h"

namespace tower {

namespace {

using Clock = std::chrono::steady_clock;

// The back-off: after the quiet polls (the spin, for a partner that is already there), yield
// while the wait may end within a step's compute, so a rank that shares a core with the one it
// waits for hands it the core at once; then sleep in slices that grow with the wait, so a
// stalled rank uses well under a percent of a core. A sleeping wait notices its end at most a
// slice late: under 5% of the time already waited, 10 ms at the most. Only a wait past
// publish_s writes the arrival table: the short ones, thousands per step, pay nothing for it.
constexpr double publish_s = 1e-3;
constexpr double yield_s = 20e-3;
constexpr double min_sleep_s = 50e-6;
constexpr double max_sleep_s = 10e-3;
// An MPI request advances only while its owner polls it (a non-blocking collective's rounds, a
// large message's fragments): sleeping there would stretch every round by a slice. Request
// waits yield for longer and then sleep in short slices, at a percent or two of a core.
constexpr double request_yield_s = 2.0;
constexpr double request_max_sleep_s = 1e-3;
constexpr double idle_min_sleep_s = 8e-6;
constexpr double idle_max_sleep_s = 1e-3;
constexpr int background_polls = 16;
constexpr double background_max_sleep_s = 1e-3;

std::atomic<double> warn_limit{60.0};
std::atomic<double> abort_limit{600.0};
std::atomic<int64_t> current_step{-1};
thread_local const char* context_unit = nullptr;
thread_local int64_t context_index = -1;
thread_local bool background_waits = false;

void back_off(double waited, detail::BackOff policy)
{
	if (background_waits) {
		std::this_thread::sleep_for(
			std::chrono::duration<double>(std::clamp(waited / 20, min_sleep_s, background_max_sleep_s)));
		return;
	}
	if (policy == detail::BackOff::idle) {
		// From 8 us up to 1 ms: a reply on its way is caught soon, a long wait polls 1000 times a second.
		std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(waited / 2, idle_min_sleep_s, idle_max_sleep_s)));
		return;
	}
	const bool drives_progress = policy == detail::BackOff::drives_progress;
	if (waited < (drives_progress ? request_yield_s : yield_s)) {
		std::this_thread::yield();
		return;
	}
	const double slice = std::clamp(waited / 20, min_sleep_s, drives_progress ? request_max_sleep_s : max_sleep_s);
	std::this_thread::sleep_for(std::chrono::duration<double>(slice));
}

std::string location(const WaitSite& site)
{
	std::string out = site.operation;
	if (site.unit)
		out += fmt::format(" {} {}", site.unit, site.index);
	if (context_unit)
		out += fmt::format(" for {} {}", context_unit, context_index);
	return out;
}

int world_rank_of(MPI_Comm comm, int rank)
{
	if (comm == MPI_COMM_NULL)
		return -1;
	MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
	MPI_Comm_group(comm, &group);
	MPI_Comm_group(MPI_COMM_WORLD, &world);
	int out = MPI_UNDEFINED;
	MPI_Group_translate_ranks(group, 1, &rank, world, &out);
	MPI_Group_free(&group);
	MPI_Group_free(&world);
	return out == MPI_UNDEFINED ? -1 : out;
}

// The world ranks of `comm`'s members, in comm order.
std::vector<int> members_of(MPI_Comm comm)
{
	int size = 0;
	MPI_Comm_size(comm, &size);
	std::vector<int> out;
	for (int r = 0; r < size; ++r)
		out.push_back(world_rank_of(comm, r));
	return out;
}

std::string describe_rank(int world_rank)
{
	const ArrivalState s = arrival_of(world_rank);
	if (!s.known)
		return fmt::format("rank {} (on another host: its state is not visible from here)", world_rank);
	const std::string step = s.step >= 0 ? fmt::format(", step {}", s.step + 1) : "";
	if (s.stopped)
		return fmt::format("rank {} (its process is stopped, by a signal or a debugger{}{})", world_rank, step,
				   s.operation.empty() ? "" : fmt::format("; it last waited in {}", s.operation));
	if (s.waiting)
		return fmt::format("rank {} (waiting {:.1f} s in {}{}{})", world_rank, s.seconds, s.operation,
				   s.peer >= 0 ? fmt::format(" for rank {}", s.peer) : "", step);
	return fmt::format("rank {} (in no tower wait for {:.1f} s: computing, stopped or hung{}{})", world_rank,
			   s.seconds, step, s.operation.empty() ? "" : fmt::format("; it last waited in {}", s.operation));
}

std::string join_described(const std::vector<int>& world_ranks)
{
	std::vector<std::string> parts;
	for (int r : world_ranks)
		parts.push_back(describe_rank(r));
	return fmt::format("{}", fmt::join(parts, "; "));
}

// Ranks not visibly inside this same wait: from the waiter's exact knowledge, else the peer,
// else the host's arrival table.
std::vector<int> not_arrived(const WaitSite& site, const std::vector<int>& members, const MissingRanks& missing)
{
	std::vector<int> out;
	if (missing) {
		for (int r : missing())
			out.push_back(members.at(static_cast<size_t>(r)));
		return out;
	}
	if (site.peer >= 0)
		return {members.at(static_cast<size_t>(site.peer))};
	const int me = world_rank_or_unknown();
	const std::string here = location(site);
	for (int r : members) {
		if (r == me)
			continue;
		const ArrivalState s = arrival_of(r);
		if (!s.known || !s.waiting || s.stopped || s.operation != here)
			out.push_back(r);
	}
	return out;
}

} // namespace

WaitContext::WaitContext(const char* unit, int64_t index) : outer_unit_(context_unit), outer_index_(context_index)
{
	context_unit = unit;
	context_index = index;
}

WaitContext::~WaitContext()
{
	context_unit = outer_unit_;
	context_index = outer_index_;
}

void set_stall_limits(const StallLimits& limits)
{
	if (limits.warn_s < 0 || limits.abort_s < 0)
		throw AgreedError(fmt::format("`stall_warn` {} / `stall_abort` {}: stall limits are seconds, 0 or more",
					      limits.warn_s, limits.abort_s));
	if (limits.abort_s > 0 && limits.warn_s > limits.abort_s)
		throw AgreedError(fmt::format("`stall_warn` {} comes after `stall_abort` {}: warn first, or use "
					      "`stall_abort` 0 to never abort", limits.warn_s, limits.abort_s));
	warn_limit = limits.warn_s;
	abort_limit = limits.abort_s;
}

StallLimits stall_limits()
{
	return {warn_limit.load(), abort_limit.load()};
}

void set_wait_step(int64_t step)
{
	current_step = step;
	arrival_set_step(step);
}

std::string describe_stall(const WaitSite& site, double waited_s, const MissingRanks& missing)
{
	const int64_t step = current_step.load();
	std::string text = fmt::format("stall: waited {:.1f} s in {}{}", waited_s, location(site),
				       step >= 0 ? fmt::format(" at step {}", step + 1) : "");
	if (site.comm == MPI_COMM_NULL)
		return text + " (the ranks taking part are not known here)";
	const std::vector<int> members = members_of(site.comm);
	const std::vector<int> missing_ranks = not_arrived(site, members, missing);
	text += fmt::format(" among {} rank(s)", members.size());
	if (site.peer >= 0)
		text += fmt::format(", for a message from rank {}", members.at(static_cast<size_t>(site.peer)));
	text += missing_ranks.empty() ? "; every rank seems to have arrived"
				      : fmt::format("; not arrived: {}", join_described(missing_ranks));
	// A point-to-point wait names its partner, which may itself wait for another: name the
	// ranks of the group that are in no wait at all, where a chain of waits ends.
	if (site.peer >= 0) {
		std::vector<int> idle;
		for (int r : members) {
			const ArrivalState s = arrival_of(r);
			if (s.known && (!s.waiting || s.stopped) && r != world_rank_or_unknown() &&
			    std::find(missing_ranks.begin(), missing_ranks.end(), r) == missing_ranks.end())
				idle.push_back(r);
		}
		if (!idle.empty())
			text += fmt::format("; in no wait: {}", join_described(idle));
	}
	return text;
}

namespace detail {

void watched_loop(const std::function<bool()>& done, const WaitSite& site, const MissingRanks& missing,
		  BackOff policy)
{
	const auto start = Clock::now();
	const StallLimits limits = stall_limits();
	struct Published {
		bool entered = false;
		~Published()
		{
			if (entered)
				arrival_leave();
		}
	} published;
	bool warned = false;
	for (;;) {
		if (done())
			return;
		const double waited = seconds_since(start);
		// The arrival table names the rank's main-thread wait: a background thread's would
		// overwrite it (its stalls are still warned of and aborted).
		if (!published.entered && policy != BackOff::idle && !background_waits && waited >= publish_s) {
			arrival_enter(location(site), site.peer >= 0 ? world_rank_of(site.comm, site.peer) : -1);
			published.entered = true;
		}
		if (!warned && limits.warn_s > 0 && waited >= limits.warn_s) {
			warned = true;
			const std::string report = describe_stall(site, waited, missing);
			std::fprintf(stderr, "[rank %d] warning: %s\n", world_rank_or_unknown(), spelled(report).c_str());
			std::fflush(stderr);
		}
		if (limits.abort_s > 0 && waited >= limits.abort_s)
			fatal(fmt::format("error: {}; aborting the job after `stall_abort` {} s (0 never aborts)",
					  describe_stall(site, waited, missing), limits.abort_s));
		back_off(waited, policy);
	}
}

} // namespace detail

void wait_idle(const std::function<bool()>& done, const WaitSite& site)
{
	for (int i = 0; i < 16; ++i)
		if (done())
			return;
	detail::watched_loop(done, site, {}, detail::BackOff::idle);
}

void set_background_waits(bool background)
{
	background_waits = background;
}

int detail::quiet_polls_now()
{
	return background_waits ? background_polls : quiet_polls;
}

void wait_request(MPI_Request& request, const WaitSite& site)
{
	auto done = [&] {
		int flag = 0;
		TOWER_MPI(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
		return flag != 0;
	};
	for (int i = 0; i < detail::quiet_polls_now(); ++i)
		if (done())
			return;
	detail::watched_loop(done, site, {}, detail::BackOff::drives_progress);
}

void wait_requests(std::vector<MPI_Request>& requests, const WaitSite& site)
{
	if (requests.empty())
		return;
	auto done = [&] {
		int flag = 0;
		TOWER_MPI(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE));
		return flag != 0;
	};
	for (int i = 0; i < detail::quiet_polls_now(); ++i)
		if (done())
			return;
	detail::watched_loop(done, site, {}, detail::BackOff::drives_progress);
}

} // namespace tower
