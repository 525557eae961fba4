// Distributed sampler tests: the generator, the permutation, and how global batches are sharded.
#include <algorithm>
#include <set>
#include <vector>

#include <doctest/doctest.h>

#include "data/sampler.h"
#include "data/shuffle.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

constexpr uint64_t seed = 1234;

std::vector<int64_t> as_vector(std::span<const int64_t> s)
{
	return {s.begin(), s.end()};
}

// The global batch of `step`, assembled from every rank's shard of a world of `ranks`.
std::vector<int64_t> global_from_shards(int64_t n, int64_t batch, int ranks, int64_t epoch, int64_t step)
{
	std::vector<int64_t> all;
	for (int r = 0; r < ranks; ++r) {
		DistributedSampler s(n, batch, r, ranks, seed);
		const auto shard = s.shard(epoch, step);
		all.insert(all.end(), shard.begin(), shard.end());
	}
	return all;
}

} // namespace

TEST_CASE("splitmix64 gives the published sequence for seed 0")
{
	SplitMix64 g(0);
	CHECK(g.next() == 0xe220a8397b1dcdafULL);
	CHECK(g.next() == 0x6e789e6aa1b965f4ULL);
	SplitMix64 h(7);
	for (uint64_t bound : {1ULL, 2ULL, 3ULL, 10ULL, 60000ULL})
		for (int i = 0; i < 100; ++i)
			CHECK(h.below(bound) < bound);
}

TEST_CASE("an epoch's order is a permutation, fixed by (seed, epoch)")
{
	const auto a = epoch_permutation(1000, seed, 3);
	auto sorted = a;
	std::sort(sorted.begin(), sorted.end());
	for (int64_t i = 0; i < 1000; ++i)
		CHECK(sorted[static_cast<size_t>(i)] == i);
	CHECK(a == epoch_permutation(1000, seed, 3));
	CHECK(a != epoch_permutation(1000, seed, 4));
	CHECK(a != epoch_permutation(1000, seed + 1, 3));
	CHECK(epoch_permutation(0, seed, 0).empty());
}

TEST_CASE("shards of one step are disjoint, contiguous slices whose union is the global batch")
{
	const int64_t n = 1003, batch = 7;
	for (int ranks = 1; ranks <= 5; ++ranks) {
		const auto global = global_from_shards(n, batch, ranks, 2, 5);
		REQUIRE(global.size() == static_cast<size_t>(batch * ranks));
		CHECK(std::set<int64_t>(global.begin(), global.end()).size() == global.size());
		const auto order = epoch_permutation(n, seed, 2);
		const auto from = order.begin() + 5 * batch * ranks;
		CHECK(global == std::vector<int64_t>(from, from + batch * ranks));
	}
}

TEST_CASE("N ranks with batch b see the same global batches as one rank with batch N*b")
{
	const int64_t n = 600, batch = 8;
	for (int ranks : {2, 3, 4}) {
		DistributedSampler single(n, batch * ranks, 0, 1, seed);
		CHECK(single.steps_per_epoch() == n / (batch * ranks));
		for (int64_t epoch : {0, 1})
			for (int64_t step = 0; step < single.steps_per_epoch(); step += 3)
				CHECK(global_from_shards(n, batch, ranks, epoch, step) == as_vector(single.shard(epoch, step)));
	}
}

TEST_CASE("an epoch visits distinct samples and drops the incomplete last global batch")
{
	const int64_t n = 103, batch = 5;
	DistributedSampler s(n, batch, 1, 2, seed);
	CHECK(s.global_batch() == 10);
	CHECK(s.steps_per_epoch() == 10);
	std::set<int64_t> seen;
	for (int ranks_seen = 0; ranks_seen < 2; ++ranks_seen)
		for (int64_t step = 0; step < 10; ++step) {
			// shard() views the sampler's order, so the sampler must outlive the loop (a temporary
			// here was freed before the loop read it; AddressSanitizer caught it).
			DistributedSampler rank_sampler(n, batch, ranks_seen, 2, seed);
			for (int64_t i : rank_sampler.shard(0, step))
				seen.insert(i);
		}
	CHECK(seen.size() == 100);
	CHECK_THROWS_AS(s.shard(0, 10), Error);
}

TEST_CASE("different epochs shuffle differently; the same epoch repeats exactly")
{
	DistributedSampler a(500, 10, 0, 1, seed), b(500, 10, 0, 1, seed);
	const auto first = as_vector(a.shard(0, 0));
	CHECK(as_vector(a.shard(1, 0)) != first);
	CHECK(as_vector(b.shard(0, 0)) == first);
	CHECK(as_vector(a.shard(0, 0)) == first);
	CHECK(as_vector(DistributedSampler(500, 10, 0, 1, seed + 1).shard(0, 0)) != first);
}

TEST_CASE("across real ranks the shards are disjoint and together form the single-rank batch")
{
	const int64_t n = 1000, batch = 6;
	const int size = world().size();
	DistributedSampler mine(n, batch, world().rank(), size, seed);
	const auto shard = mine.shard(1, 2);
	std::vector<int64_t> all(static_cast<size_t>(batch * size));
	TOWER_MPI(MPI_Allgather(shard.data(), static_cast<int>(batch), MPI_INT64_T, all.data(), static_cast<int>(batch),
				MPI_INT64_T, world().comm()));
	DistributedSampler single(n, batch * size, 0, 1, seed);
	CHECK(all == as_vector(single.shard(1, 2)));
	CHECK(std::set<int64_t>(all.begin(), all.end()).size() == all.size());
}

TEST_CASE("bad sampler arguments are agreed errors")
{
	CHECK_THROWS_AS(DistributedSampler(100, 0, 0, 1, seed), AgreedError);
	CHECK_THROWS_AS(DistributedSampler(100, 10, 2, 2, seed), AgreedError);
	CHECK_THROWS_WITH_AS(DistributedSampler(100, 30, 0, 4, seed), doctest::Contains("fewer than one global batch"),
			     AgreedError);
}
