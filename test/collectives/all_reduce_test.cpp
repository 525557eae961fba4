// All-reduce modes against a float64 reference: every mode, dtype and op, awkward sizes, in and
// out of place, simulated topologies and replica subgroups.
#include <doctest/doctest.h>

#include <numeric>

#include "collectives/all_reduce.h"
#include "runtime/error.h"
#include "test/collectives/check_data.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

constexpr DType all_dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
constexpr ReduceOp all_ops[] = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min};
// 0, 1, 7, primes, sizes not divisible by 2, 3 or 4, and several chunks of 64 bytes.
constexpr size_t sizes[] = {0, 1, 2, 3, 7, 13, 61, 251, 1000};

// A tiny chunk sends every size above a few elements through the multi-chunk paths.
AllReduceOptions small_chunks()
{
	AllReduceOptions options;
	options.chunk_bytes = 64;
	return options;
}

// Runs every dtype, op and size through `all_reduce` and returns the number of wrong elements.
size_t wrong_elements(AllReduce& all_reduce, const std::vector<int>& group, int group_rank)
{
	size_t wrong = 0;
	for (DType dtype : all_dtypes)
		for (ReduceOp op : all_ops)
			for (size_t count : sizes)
				for (bool in_place : {true, false}) {
					std::vector<double> mine(count);
					for (size_t i = 0; i < count; ++i)
						mine[i] = test::value_of(group[static_cast<size_t>(group_rank)], i);
					std::vector<char> send = test::encode(mine, dtype);
					std::vector<char> recv(send.size(), 0x5a);
					void* out = in_place ? send.data() : recv.data();
					all_reduce.run(send.data(), out, count, dtype, op);
					for (size_t i = 0; i < count; ++i) {
						const double got = test::decode(static_cast<char*>(out) + i * dtype_size(dtype), dtype);
						const double want = test::reference(group, i, op, dtype);
						if (std::abs(got - want) > test::tolerance(dtype, op) * std::max(1.0, std::abs(want))) {
							if (wrong < 5)
								MESSAGE(fmt::format("{} {} count {} in_place {} element {}: got {}, want {}",
										    dtype_name(dtype), reduce_op_name(op), count, in_place, i,
										    got, want));
							++wrong;
						}
					}
				}
	return wrong;
}

std::vector<int> all_ranks()
{
	std::vector<int> ranks(static_cast<size_t>(world().size()));
	std::iota(ranks.begin(), ranks.end(), 0);
	return ranks;
}

} // namespace

TEST_CASE("every mode all-reduces every dtype and op exactly")
{
	const Topology topology(world().comm(), std::nullopt);
	for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::hierarchical, AllReduceMode::naive}) {
		CAPTURE(all_reduce_mode_name(mode));
		auto all_reduce = make_all_reduce(topology, Device{}, mode, {}, small_chunks());
		CHECK(all_reduce->group_size() == world().size());
		CHECK(wrong_elements(*all_reduce, all_ranks(), world().rank()) == 0);
	}
}

TEST_CASE("hierarchical all-reduce on every simulated topology")
{
	for (int per_node = 1; per_node <= world().size(); ++per_node) {
		if (world().size() % per_node != 0)
			continue;
		CAPTURE(per_node);
		const Topology topology(world().comm(), per_node);
		auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::hierarchical, {}, small_chunks());
		CHECK(wrong_elements(*all_reduce, all_ranks(), world().rank()) == 0);
	}
}

TEST_CASE("large buffers stream through many default-sized chunks")
{
	const Topology topology(world().comm(), std::nullopt);
	const size_t count = (size_t{3} << 20) / 4 + 5; // 3 MiB of f32 and a few, past the 1 MiB chunk
	for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::hierarchical}) {
		CAPTURE(all_reduce_mode_name(mode));
		auto all_reduce = make_all_reduce(topology, Device{}, mode);
		std::vector<float> data(count);
		for (size_t i = 0; i < count; ++i)
			data[i] = static_cast<float>(test::value_of(world().rank(), i));
		all_reduce->run_in_place(data.data(), count, DType::f32, ReduceOp::sum);
		size_t wrong = 0;
		for (size_t i = 0; i < count; ++i)
			wrong += data[i] != static_cast<float>(test::reference(all_ranks(), i, ReduceOp::sum, DType::f32));
		CHECK(wrong == 0);
	}
}

TEST_CASE("replica subgroups reduce within themselves")
{
	const int n = world().size();
	for (int group_size = 1; group_size <= n; ++group_size) {
		if (n % group_size != 0)
			continue;
		// Interleaved groups {g, g + G, ...} so a group's ranks are not neighbours.
		const int groups_count = n / group_size;
		GroupAssignment groups(static_cast<size_t>(groups_count));
		for (int r = 0; r < n; ++r)
			groups[static_cast<size_t>(r % groups_count)].push_back(r);
		const auto& mine = groups[static_cast<size_t>(world().rank() % groups_count)];
		const int position = world().rank() / groups_count;
		CAPTURE(group_size);
		const Topology topology(world().comm(), std::nullopt);
		for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::hierarchical, AllReduceMode::naive}) {
			CAPTURE(all_reduce_mode_name(mode));
			auto all_reduce = make_all_reduce(topology, Device{}, mode, groups, small_chunks());
			CHECK(all_reduce->group_size() == group_size);
			CHECK(wrong_elements(*all_reduce, mine, position) == 0);
		}
	}
}

TEST_CASE("a bad group assignment is an error naming the problem")
{
	CHECK(validate_group_assignment({}, 4) == 4);
	CHECK(validate_group_assignment({{0, 2}, {1, 3}}, 4) == 2);
	CHECK_THROWS_WITH_AS(validate_group_assignment({{0, 1}, {1, 2}}, 3), doctest::Contains("rank 1 more than once"),
			     AgreedError);
	CHECK_THROWS_WITH_AS(validate_group_assignment({{0, 1}, {3}}, 4), doctest::Contains("leaves out rank(s) 2"),
			     AgreedError);
	CHECK_THROWS_WITH_AS(validate_group_assignment({{0, 1, 2}, {3}}, 4), doctest::Contains("different sizes"),
			     AgreedError);
	CHECK_THROWS_WITH_AS(validate_group_assignment({{0, 7}}, 2), doctest::Contains("names rank 7"), AgreedError);
	CHECK_THROWS_AS(parse_all_reduce_mode("tree"), AgreedError);
}
