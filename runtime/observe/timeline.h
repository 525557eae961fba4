// The run's timeline: Chrome trace events (Perfetto, chrome://tracing), one track per rank.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <mpi.h>

namespace tower::timeline {

// Instrumenting code: put a Span around the work to show, in any layer at or above runtime/
// (collectives/, optim/ and models/ stay free of it: record around their calls instead).
//
//	{
//		timeline::Span span("all-reduce", "comm");
//		span.arg("bucket", b).arg("bytes", bytes).arg("mode", "ring");
//		... the work ...
//	} // the event is written here, with the span's duration
//
// Without a recording a Span costs one atomic load; its args are then not formatted.
// Spans may be recorded from any thread: each thread is a row of its rank's track, named by
// name_thread() (or "thread N").
//
// File layout: while recording, rank r appends its events to "PATH.rank<r>", one event per line
// (every line after the first led by its comma), written out whole at least once a second: the
// Trace Event Format's JSON array lacking only its closing bracket, which that format lets a
// reader add, so a killed run leaves readable files. finish() gathers every rank's events into
// PATH (a complete JSON array) and removes the parts.

namespace detail {
extern std::atomic<bool> recording;
// The recording now running (or last run): a span that began in another one is dropped, since
// its start was measured against that recording's clock.
int generation();
double now_us();
void write_complete(const char* name, const char* category, int generation, double start_us, double end_us,
		    const std::string& args);
// Spans written after their work ends (DeviceSpan) register what writes them; finish() runs it,
// on the finishing thread, before the recording closes. Returns the handle to remove it with.
int add_before_finish(std::function<void()> write_pending);
void remove_before_finish(int handle);
} // namespace detail

// Whether this process is recording a timeline.
inline bool enabled()
{
	return detail::recording.load(std::memory_order_acquire);
}

// One complete ("X") event from construction to destruction on the calling thread.
class Span {
public:
	Span(const char* name, const char* category)
		: name_(name), category_(category), generation_(enabled() ? detail::generation() : -1),
		  start_us_(generation_ >= 0 ? detail::now_us() : -1.0)
	{
	}
	~Span()
	{
		if (start_us_ >= 0)
			detail::write_complete(name_, category_, generation_, start_us_, detail::now_us(), args_);
	}
	Span(const Span&) = delete;
	Span& operator=(const Span&) = delete;

	// Shown in the event's details; keys must be plain identifiers (no quotes or backslashes).
	Span& arg(const char* key, int64_t value);
	Span& arg(const char* key, std::string_view value);

private:
	void add_key(const char* key);

	const char* name_;
	const char* category_;
	int generation_;  // the recording the span began in; negative: none
	double start_us_; // negative: not recording
	std::string args_; // the args object's members, as JSON text
};

// Names the calling thread's row ("communication", ...) in every later recording.
void name_thread(const char* name);

// Collective over `comm`: starts recording this process's events to PATH.rank<r> (see above),
// with time 0 at a barrier so the ranks' tracks line up. Throws tower::AgreedError on every rank
// naming the rank and the reason when a file cannot be written or a recording is already running.
void start(MPI_Comm comm, const std::string& path);

// Collective over `comm`: stops recording and writes the merged PATH. Throws tower::AgreedError
// when PATH cannot be written (the parts are then kept).
void finish(MPI_Comm comm);

// Stops recording on this rank alone, keeping its part file as it is (an aborted run).
void abandon();

// Starts a recording for its lifetime when given a path; one that was not finished is abandoned.
class Recording {
public:
	Recording() = default;
	Recording(MPI_Comm comm, const std::string& path);
	~Recording();
	Recording(const Recording&) = delete;
	Recording& operator=(const Recording&) = delete;
	// Collective: finish() when recording.
	void finish();

private:
	MPI_Comm comm_ = MPI_COMM_NULL;
	bool active_ = false;
};

} // namespace tower::timeline
