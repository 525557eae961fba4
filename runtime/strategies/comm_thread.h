// One background thread that runs communication jobs in the order they were submitted.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tower {

// Gradient buckets (replicated) and local-sgd's outer all-reduce run here while the main thread
// goes on computing, so communication hides behind compute. Every rank submits the same jobs in the same order, which
// keeps the collectives matched across ranks.
class CommThread {
public:
	// `on_start` runs first on the new thread, for per-thread setup such as selecting the rank's
	// GPU (CUDA's current device is per host thread). If it throws, no job runs: submitted jobs
	// are dropped and wait_all() rethrows its exception.
	explicit CommThread(std::function<void()> on_start = {});
	~CommThread();
	CommThread(const CommThread&) = delete;
	CommThread& operator=(const CommThread&) = delete;

	void submit(std::function<void()> job);

	// Blocks until every submitted job has run; rethrows the first exception a job threw (or, on
	// every call, the one on_start threw).
	void wait_all();

	// Seconds spent inside jobs since construction.
	double busy_seconds() const;

private:
	void loop();

	mutable std::mutex mutex_;
	std::condition_variable wake_;
	std::condition_variable idle_;
	std::deque<std::function<void()>> jobs_;
	bool running_job_ = false;
	bool stopping_ = false;
	std::exception_ptr error_;
	std::exception_ptr start_error_;
	double busy_seconds_ = 0.0;
	std::thread thread_;
};

} // namespace tower
