// One background thread that runs communication jobs in the order they were submitted.
#include "runtime/strategies/comm_thread.h"

#include <chrono>

#include "runtime/observe/timeline.h"

namespace tower {

CommThread::CommThread(std::function<void()> on_start)
	: thread_([this, start = std::move(on_start)] {
		  if (start)
			  try {
				  start();
			  } catch (...) {
				  std::lock_guard lock(mutex_);
				  start_error_ = std::current_exception();
			  }
		  loop();
	  })
{
}

CommThread::~CommThread()
{
	{
		std::lock_guard lock(mutex_);
		stopping_ = true;
	}
	wake_.notify_one();
	thread_.join();
}

void CommThread::submit(std::function<void()> job)
{
	{
		std::lock_guard lock(mutex_);
		jobs_.push_back(std::move(job));
	}
	wake_.notify_one();
}

void CommThread::wait_all()
{
	std::unique_lock lock(mutex_);
	idle_.wait(lock, [this] { return jobs_.empty() && !running_job_; });
	if (start_error_)
		std::rethrow_exception(start_error_);
	if (error_) {
		auto error = error_;
		error_ = nullptr;
		std::rethrow_exception(error);
	}
}

double CommThread::busy_seconds() const
{
	std::lock_guard lock(mutex_);
	return busy_seconds_;
}

void CommThread::loop()
{
	timeline::name_thread("communication");
	std::unique_lock lock(mutex_);
	for (;;) {
		wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
		if (jobs_.empty())
			return; // stopping, nothing left
		auto job = std::move(jobs_.front());
		jobs_.pop_front();
		if (start_error_) {
			// The thread is not set up for the jobs (its device was never selected).
			if (jobs_.empty())
				idle_.notify_all();
			continue;
		}
		running_job_ = true;
		lock.unlock();
		const auto start = std::chrono::steady_clock::now();
		std::exception_ptr error;
		try {
			job();
		} catch (...) {
			error = std::current_exception();
		}
		const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
		lock.lock();
		busy_seconds_ += took.count();
		if (error && !error_)
			error_ = error;
		running_job_ = false;
		if (jobs_.empty())
			idle_.notify_all();
	}
}

} // namespace tower
