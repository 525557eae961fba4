// A test meant to fail on the last rank only: the harness must fail it on every rank.
#include <doctest/doctest.h>

#include "test/harness/mpi_main.h"

TEST_CASE("this check fails on the last rank only")
{
	CHECK(tower::test::world().rank() != tower::test::world().size() - 1);
}

TEST_CASE("this one passes everywhere")
{
	CHECK(tower::test::world().size() >= 1);
}
