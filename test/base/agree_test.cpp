// Tests of the cross-rank verdict helpers and string gathering.
#include <string>

#include <doctest/doctest.h>

#include "base/mpi/agree.h"
#include "base/error.h"
#include "base/mpi/gather.h"
#include "test/harness/mpi_main.h"

using tower::test::world;

TEST_CASE("agree passes when no rank has a problem")
{
	CHECK_NOTHROW(tower::agree(world().comm(), ""));
	CHECK(tower::all_true(world().comm(), true));
}

TEST_CASE("a problem on the last rank alone is raised on every rank, naming it")
{
	const int last = world().size() - 1;
	const std::string problem = world().rank() == last ? "shape 3x4 differs" : "";
	std::string message;
	try {
		tower::agree(world().comm(), problem);
	} catch (const tower::AgreedError& e) {
		message = e.what();
	}
	CHECK(message == "rank " + std::to_string(last) + ": shape 3x4 differs");
	CHECK_FALSE(tower::all_true(world().comm(), world().rank() != last));
}

TEST_CASE("gather_strings collects every rank in order on the root")
{
	const auto all = tower::gather_strings(world().comm(), std::string(static_cast<size_t>(world().rank()), 'x'));
	if (world().rank() == 0) {
		REQUIRE(all.size() == static_cast<size_t>(world().size()));
		for (int r = 0; r < world().size(); ++r)
			CHECK(all[static_cast<size_t>(r)] == std::string(static_cast<size_t>(r), 'x'));
	} else {
		CHECK(all.empty());
	}
}

TEST_CASE("the world runs with MPI_THREAD_MULTIPLE")
{
	CHECK(world().thread_level() == tower::ThreadLevel::multiple);
}

TEST_CASE("ranks with the same problem are named together")
{
	std::string message;
	try {
		tower::agree(world().comm(), "bad `data`");
	} catch (const tower::AgreedError& e) {
		message = e.what();
	}
	std::string ranks;
	for (int r = 0; r < world().size(); ++r)
		ranks += (r ? ", " : "") + std::to_string(r);
	CHECK(message == (world().size() == 1 ? "rank 0" : "ranks " + ranks) + ": bad `data`");
}
