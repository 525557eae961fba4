// Tests of the communication thread's start hook, which selects the rank's GPU on that thread.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/strategies/comm_thread.h"

using namespace tower;

namespace {

thread_local int selected_here = -1;

} // namespace

TEST_CASE("the start hook runs on the communication thread before its first job")
{
	std::thread::id hook_thread, job_thread;
	int seen_by_job = -2;
	CommThread thread([&] {
		hook_thread = std::this_thread::get_id();
		selected_here = 3;
	});
	thread.submit([&] {
		job_thread = std::this_thread::get_id();
		seen_by_job = selected_here;
	});
	thread.wait_all();
	CHECK(job_thread == hook_thread);
	CHECK(job_thread != std::this_thread::get_id());
	CHECK(seen_by_job == 3);
	CHECK(selected_here == -1); // the hook set the communication thread's copy, not this one
}

TEST_CASE("a start hook that throws runs no job, and every wait_all reports it")
{
	std::atomic<int> jobs_run{0};
	CommThread thread([] { throw std::runtime_error("cudaSetDevice(1) failed: invalid device ordinal"); });
	thread.submit([&] { ++jobs_run; });
	CHECK_THROWS_WITH_AS(thread.wait_all(), doctest::Contains("invalid device ordinal"), std::runtime_error);
	thread.submit([&] { ++jobs_run; });
	CHECK_THROWS_WITH_AS(thread.wait_all(), doctest::Contains("invalid device ordinal"), std::runtime_error);
	CHECK(jobs_run == 0);
}

TEST_CASE("without a start hook jobs run in order and errors come back once")
{
	std::vector<int> order;
	CommThread thread;
	for (int i = 0; i < 3; ++i)
		thread.submit([&order, i] { order.push_back(i); });
	thread.submit([] { throw std::runtime_error("job failed"); });
	CHECK_THROWS_WITH_AS(thread.wait_all(), doctest::Contains("job failed"), std::runtime_error);
	CHECK(order == std::vector<int>{0, 1, 2});
	CHECK_NOTHROW(thread.wait_all());
}
