// Tests of the topology: real and simulated nodes, the divisor error, and what crosses hosts eagerly.
#include <cstdlib>

#include <doctest/doctest.h>

#include "base/error.h"
#include "base/mpi/eager_limit.h"
#include "base/mpi/topology.h"
#include "test/harness/mpi_main.h"

using tower::Topology;
using tower::test::world;

namespace {

void check_consistent(const Topology& t)
{
	CHECK(t.size() == world().size());
	CHECK(t.rank() == world().rank());
	CHECK(t.local_rank() >= 0);
	CHECK(t.local_rank() < t.local_size());
	CHECK(t.node() >= 0);
	CHECK(t.node() < t.node_count());
	CHECK(t.node_count() * t.local_size() == t.size());
	int cross_size = 0, cross_rank = 0, node_size = 0, node_rank = 0;
	MPI_Comm_size(t.cross_comm(), &cross_size);
	MPI_Comm_rank(t.cross_comm(), &cross_rank);
	MPI_Comm_size(t.node_comm(), &node_size);
	MPI_Comm_rank(t.node_comm(), &node_rank);
	CHECK(cross_size == t.node_count());
	CHECK(cross_rank == t.node());
	CHECK(node_size == t.local_size());
	CHECK(node_rank == t.local_rank());
}

} // namespace

TEST_CASE("one host: every rank is on node 0")
{
	const Topology t(world().comm(), std::nullopt);
	check_consistent(t);
	CHECK_FALSE(t.simulated());
	CHECK(t.node_count() == 1);
	CHECK(t.local_rank() == world().rank());
	CHECK(t.host_local_rank() == world().rank());
}

TEST_CASE("simulated nodes group consecutive ranks")
{
	for (int k = 1; k <= world().size(); ++k) {
		if (world().size() % k != 0)
			continue;
		CAPTURE(k);
		const Topology t(world().comm(), k);
		check_consistent(t);
		CHECK(t.simulated());
		CHECK(t.local_size() == k);
		CHECK(t.node() == world().rank() / k);
		CHECK(t.local_rank() == world().rank() % k);
		CHECK(t.node_shares_memory());
	}
}

TEST_CASE("a grouping that does not divide the world is an error on every rank")
{
	const int k = world().size() + 1;
	CHECK_THROWS_AS(Topology(world().comm(), k), tower::AgreedError);
	CHECK_THROWS_WITH_AS(Topology(world().comm(), 0),
			     doctest::Contains("does not divide"), tower::AgreedError);
}

TEST_CASE("one host: a communicator spans no hosts")
{
	CHECK_FALSE(tower::spans_hosts(world().comm()));
}

#ifdef OPEN_MPI
TEST_CASE("Open MPI's TCP eager limit, less the headers' room, is what a message across hosts carries")
{
	// Debian's default is 64 KiB; an MCA setting in the environment replaces it.
	const char* set = std::getenv("OMPI_MCA_btl_tcp_eager_limit");
	const size_t limit = set ? std::strtoull(set, nullptr, 10) : 65536;
	int level_before = 0, level_after = 0;
	MPI_Query_thread(&level_before);
	const std::optional<size_t> payload = tower::tcp_eager_payload_bytes();
	REQUIRE(payload.has_value());
	CHECK(*payload == limit - 512);
	// The tool interface's first start must leave the thread level MPI_Init granted.
	MPI_Query_thread(&level_after);
	CHECK(level_after == level_before);
	CHECK(tower::tcp_eager_payload_bytes() == payload);
}
#endif
