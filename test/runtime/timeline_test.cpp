// Tests of the timeline recorder's API: spans from two threads, args, the merged file, and misuse.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <doctest/doctest.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/observe/timeline.h"
#include "test/harness/mpi_main.h"

using tower::test::world;
namespace timeline = tower::timeline;

namespace {

// One path for the whole job: rank 0's temporary name, broadcast.
std::string shared_path(const char* stem)
{
	char name[256] = {};
	if (world().rank() == 0)
		std::snprintf(name, sizeof name, "/tmp/tower-timeline-unit-%d-%s.json", static_cast<int>(::getpid()), stem);
	MPI_Bcast(name, sizeof name, MPI_CHAR, 0, world().comm());
	return name;
}

nlohmann::json read_json(const std::string& path)
{
	std::ifstream in(path);
	std::stringstream text;
	text << in.rdbuf();
	return nlohmann::json::parse(text.str());
}

} // namespace

TEST_CASE("spans from the main and a named thread land on their rank's track, args escaped")
{
	const std::string path = shared_path("spans");
	CHECK_FALSE(timeline::enabled());
	timeline::start(world().comm(), path);
	CHECK(timeline::enabled());
	{
		timeline::Span outer("outer", "test");
		outer.arg("rank", world().rank()).arg("note", "say \"hi\"\\ok");
		std::thread helper([] {
			timeline::name_thread("helper");
			timeline::Span inner("on helper", "test");
		});
		helper.join();
	}
	timeline::finish(world().comm());
	CHECK_FALSE(timeline::enabled());

	if (world().rank() == 0) {
		const nlohmann::json events = read_json(path);
		for (int r = 0; r < world().size(); ++r) {
			int outer = 0, helper_rows = 0, names = 0;
			for (const auto& e : events) {
				if (e["pid"] != r)
					continue;
				if (e["name"] == "process_name")
					names += e["args"]["name"] == "rank " + std::to_string(r) ? 1 : 0;
				if (e["name"] == "outer") {
					++outer;
					CHECK(e["ph"] == "X");
					CHECK(e["dur"].get<double>() >= 0.0);
					CHECK(e["args"]["rank"] == r);
					CHECK(e["args"]["note"] == "say \"hi\"\\ok");
				}
				if (e["name"] == "on helper")
					for (const auto& t : events)
						if (t["name"] == "thread_name" && t["pid"] == r && t["tid"] == e["tid"])
							helper_rows += t["args"]["name"] == "helper" ? 1 : 0;
			}
			CHECK_MESSAGE(outer == 1, "rank ", r);
			CHECK_MESSAGE(names == 1, "rank ", r);
			CHECK_MESSAGE(helper_rows == 1, "rank ", r, ": the helper's span is not on a row named helper");
		}
		std::remove(path.c_str());
	}
	std::ifstream part(path + ".rank" + std::to_string(world().rank()));
	CHECK_FALSE(part.good()); // merged: the part is gone
}

TEST_CASE("finish() first writes the spans still pending (a GPU span's), and a removed writer is not run")
{
	const std::string path = shared_path("pending");
	timeline::start(world().comm(), path);
	const int generation = timeline::detail::generation();
	const double at = timeline::detail::now_us();
	int removed_runs = 0;
	const int kept = timeline::detail::add_before_finish([&] {
		timeline::detail::write_complete("pending", "test", generation, at, at + 5.0, "\"clock\":\"gpu\"");
	});
	const int removed = timeline::detail::add_before_finish([&] { ++removed_runs; });
	timeline::detail::remove_before_finish(removed);
	timeline::finish(world().comm());
	timeline::detail::remove_before_finish(kept);
	CHECK(removed_runs == 0);
	if (world().rank() == 0) {
		const nlohmann::json events = read_json(path);
		for (int r = 0; r < world().size(); ++r) {
			int pending = 0;
			for (const auto& e : events)
				if (e["pid"] == r && e["name"] == "pending") {
					++pending;
					CHECK(e["dur"].get<double>() == doctest::Approx(5.0));
					CHECK(e["args"]["clock"] == "gpu");
				}
			CHECK_MESSAGE(pending == 1, "rank ", r);
		}
		std::remove(path.c_str());
	}
}

TEST_CASE("a span while nothing is recorded writes nothing, and a second start is refused on every rank")
{
	{
		timeline::Span idle("idle", "test");
		idle.arg("bytes", 1);
	}
	const std::string path = shared_path("twice");
	timeline::start(world().comm(), path);
	CHECK_THROWS_AS(timeline::start(world().comm(), path + ".other"), tower::AgreedError);
	timeline::finish(world().comm());
	if (world().rank() == 0) {
		for (const auto& e : read_json(path))
			CHECK(e["name"] != "idle");
		std::remove(path.c_str());
	}
}

TEST_CASE("a path the last rank cannot write is refused on every rank, and the others' parts go")
{
	const std::string good = shared_path("unwritable");
	const bool last = world().rank() == world().size() - 1;
	CHECK_THROWS_AS(timeline::start(world().comm(), last ? "/nonexistent-directory/trace.json" : good),
			tower::AgreedError);
	CHECK_FALSE(timeline::enabled());
	std::ifstream part(good + ".rank" + std::to_string(world().rank()));
	CHECK_FALSE(part.good());
	// Nothing is left half-started: the next recording begins normally.
	timeline::start(world().comm(), good);
	CHECK(timeline::enabled());
	timeline::finish(world().comm());
	if (world().rank() == 0)
		std::remove(good.c_str());
}

TEST_CASE("a span open across the end of one recording and the start of the next is in neither")
{
	const std::string first = shared_path("across-1"), second = shared_path("across-2");
	timeline::start(world().comm(), first);
	std::atomic<int> stage{0};
	std::thread helper([&] {
		{
			timeline::Span across("across", "test");
			stage.store(1, std::memory_order_release);
			// Relaxed: nothing orders this thread after the second start(), as nothing orders a
			// comm or owner thread after it in a run; the span's end must still read the clock safely.
			while (stage.load(std::memory_order_relaxed) != 2)
				std::this_thread::yield();
		}
	});
	while (stage.load(std::memory_order_acquire) != 1)
		std::this_thread::yield();
	timeline::finish(world().comm());
	timeline::start(world().comm(), second);
	stage.store(2, std::memory_order_relaxed);
	helper.join();
	timeline::finish(world().comm());
	if (world().rank() == 0) {
		for (const std::string& path : {first, second}) {
			for (const auto& e : read_json(path))
				CHECK_MESSAGE(e["name"] != "across", path, ": a span of another recording, timed against its clock");
			std::remove(path.c_str());
		}
	}
}
