// All-reduce modes against a float64 reference: every mode, dtype and op, awkward sizes, in and
// out of place, simulated topologies, replica subgroups, and buffers registered in shared memory.
#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>
#include <numeric>

#include "runtime/options/names.h"
#include "collectives/all_reduce.h"
#include "collectives/algorithms/all_reduce_hierarchical.h"
#include "collectives/algorithms/all_reduce_hierarchical_uneven.h"
#include "collectives/fusion/bucket_plan.h"
#include "collectives/fusion/pack.h"
#include "base/error.h"
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

std::vector<int> all_ranks()
{
	std::vector<int> ranks(static_cast<size_t>(world().size()));
	std::iota(ranks.begin(), ranks.end(), 0);
	return ranks;
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

// Where run()'s buffers come from in the registered-buffer tests.
enum class Placement {
	registered,       // both from allocate(), at an offset that differs by rank
	one_rank_private, // rank 0's send buffer is ordinary memory: everyone must fall back
};

// Like wrong_elements, with buffers from all_reduce.allocate(). Returns the wrong elements and
// counts the runs that took the direct path.
size_t wrong_elements_registered(AllReduce& all_reduce, const std::vector<int>& group, int group_rank,
				 Placement placement, size_t& direct_runs)
{
	constexpr size_t capacity = 1000 * 8 + 512;
	char* send_region = static_cast<char*>(all_reduce.allocate(capacity));
	char* recv_region = static_cast<char*>(all_reduce.allocate(capacity));
	// Offsets differ between ranks, as they do for gradients at different places in a bucket.
	const size_t offset = 64 * static_cast<size_t>(group_rank % 3);
	std::vector<char> private_send(capacity);
	const bool private_here = placement == Placement::one_rank_private && group_rank == 0;
	size_t wrong = 0;
	for (DType dtype : all_dtypes)
		for (ReduceOp op : all_ops)
			for (size_t count : sizes)
				for (bool in_place : {true, false}) {
					std::vector<double> mine(count);
					for (size_t i = 0; i < count; ++i)
						mine[i] = test::value_of(group[static_cast<size_t>(group_rank)], i);
					const std::vector<char> encoded = test::encode(mine, dtype);
					char* send = (private_here ? private_send.data() : send_region) + offset;
					char* out = in_place ? send : recv_region + offset;
					std::copy(encoded.begin(), encoded.end(), send);
					if (!in_place)
						std::fill(out, out + encoded.size(), char{0x5a});
					all_reduce.run(send, out, count, dtype, op);
					const auto* hierarchical = dynamic_cast<const HierarchicalAllReduce*>(&all_reduce);
					direct_runs += hierarchical && hierarchical->last_run_was_direct() ? 1 : 0;
					for (size_t i = 0; i < count; ++i) {
						const double got = test::decode(out + i * dtype_size(dtype), dtype);
						const double want = test::reference(group, i, op, dtype);
						if (std::abs(got - want) > test::tolerance(dtype, op) * std::max(1.0, std::abs(want))) {
							if (wrong < 5)
								MESSAGE(fmt::format("registered {} {} count {} in_place {} element {}: got {}, "
										    "want {}", dtype_name(dtype), reduce_op_name(op), count,
										    in_place, i, got, want));
							++wrong;
						}
					}
				}
	all_reduce.deallocate(recv_region);
	all_reduce.deallocate(send_region);
	return wrong;
}

// After reduce_shard on every node rank: reads each node rank's buffer through peer_address and
// counts the elements that differ from what that rank holds (the reduction inside its own shard,
// its own input elsewhere). Nodes are consecutive world ranks, so node rank r of this node is
// world rank node * per_node + r.
size_t wrong_in_peers(const NodeSharding& sharding, const float* mine, size_t count, ReduceOp op, int per_node)
{
	const int node_start = world().rank() / per_node * per_node;
	const std::vector<int> ranks = all_ranks();
	size_t wrong = 0;
	for (int r = 0; r < per_node; ++r) {
		const auto* theirs = reinterpret_cast<const float*>(sharding.peer_address(mine, r));
		const Segment shard = segment_of(count, static_cast<size_t>(per_node), static_cast<size_t>(r));
		for (size_t i = 0; i < count; ++i) {
			const bool inside = i >= shard.start && i < shard.start + shard.length;
			const double want = inside ? test::reference(ranks, i, op, DType::f32)
						   : test::value_of(node_start + r, i);
			wrong += std::abs(theirs[i] - want) > 1e-5 * std::max(1.0, std::abs(want));
		}
	}
	return wrong;
}

// Runs of wrong_elements_registered: every dtype, op and size but 0, in and out of place.
constexpr size_t runs_per_sweep = std::size(all_dtypes) * std::size(all_ops) * (std::size(sizes) - 1) * 2;

// Rank r's element i for the integer-mean test: about +-2^60 (i64) or +-2^28 (i32), more digits
// than a double (i64) or a float (i32) holds, so a mean computed in floating point comes out
// wrong; sums of both signs that do not divide evenly show the division truncating toward zero.
template <typename T> T big_value(int rank, size_t i)
{
	const T magnitude = (T{1} << (sizeof(T) == 8 ? 60 : 28)) + 1;
	const T sign = i % 2 == 0 ? 1 : -1;
	return sign * magnitude + static_cast<T>(7 * rank) - static_cast<T>(3 * i);
}

// Runs an integer mean of big_value through `all_reduce`, in place, on registered memory or
// ordinary memory, and returns the number of elements that differ from the integer reference.
template <typename T> size_t integer_mean_wrong(AllReduce& all_reduce, size_t count, bool registered)
{
	const DType dtype = sizeof(T) == 8 ? DType::i64 : DType::i32;
	std::vector<T> ordinary(count);
	T* data = registered ? static_cast<T*>(all_reduce.allocate(count * sizeof(T))) : ordinary.data();
	for (size_t i = 0; i < count; ++i)
		data[i] = big_value<T>(world().rank(), i);
	all_reduce.run_in_place(data, count, dtype, ReduceOp::mean);
	size_t wrong = 0;
	for (size_t i = 0; i < count; ++i) {
		T sum = 0;
		for (int r = 0; r < world().size(); ++r)
			sum += big_value<T>(r, i);
		const T want = sum / static_cast<T>(world().size()); // C++ truncates toward zero
		if (data[i] == want)
			continue;
		if (wrong < 3)
			MESSAGE(fmt::format("{} element {}: got {}, want {}", dtype_name(dtype), i, data[i], want));
		++wrong;
	}
	if (registered)
		all_reduce.deallocate(data);
	return wrong;
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

// Uneven nodes on one host: ranks 0 .. ceil(n/2)-1 on one node, the rest on another (2 ranks: 1 + 1,
// 3: 2 + 1, 4: 2 + 2 but through the uneven algorithm all the same), every dtype, op and size.
TEST_CASE("the hierarchical all-reduce for uneven nodes reduces every dtype and op exactly")
{
	const int n = world().size(), first_node = (n + 1) / 2;
	MPI_Comm node = MPI_COMM_NULL;
	MPI_Comm_split(world().comm(), world().rank() < first_node ? 0 : 1, world().rank(), &node);
	const CommHandle node_handle(node);
	UnevenHierarchicalAllReduce all_reduce(world().comm(), node, small_chunks());
	CHECK(all_reduce.group_size() == n);
	CHECK(all_reduce.node_sharding() == nullptr);
	CHECK(wrong_elements(all_reduce, all_ranks(), world().rank()) == 0);
	// Whole chunks of the default size, in place and out of place.
	UnevenHierarchicalAllReduce big(world().comm(), node, AllReduceOptions{});
	const size_t count = (size_t{3} << 20) / 4 + 5;
	std::vector<float> data(count), out(count);
	for (size_t i = 0; i < count; ++i)
		data[i] = static_cast<float>(test::value_of(world().rank(), i));
	big.run(data.data(), out.data(), count, DType::f32, ReduceOp::sum);
	size_t wrong = 0;
	for (size_t i = 0; i < count; ++i)
		wrong += out[i] != static_cast<float>(test::reference(all_ranks(), i, ReduceOp::sum, DType::f32));
	CHECK(wrong == 0);
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

TEST_CASE("registered buffers reduce directly from the peers' memory on every topology")
{
	const bool shares_host = world().size() > 1;
	for (int per_node = 1; per_node <= world().size(); ++per_node) {
		if (world().size() % per_node != 0)
			continue;
		CAPTURE(per_node);
		const Topology topology(world().comm(), per_node);
		for (AllReduceOptions options : {small_chunks(), AllReduceOptions{}}) {
			CAPTURE(options.chunk_bytes);
			auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::hierarchical, {}, options);
			CHECK(all_reduce->shares_buffers());
			size_t direct = 0;
			CHECK(wrong_elements_registered(*all_reduce, all_ranks(), world().rank(), Placement::registered, direct) ==
			      0);
			// The direct path needs peers on the node to read from.
			CHECK(direct == (per_node > 1 && shares_host ? runs_per_sweep : 0));
		}
	}
}

TEST_CASE("one rank with an ordinary buffer sends every rank down the staged path")
{
	const Topology topology(world().comm(), std::nullopt);
	auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::hierarchical, {}, small_chunks());
	size_t direct = 0;
	CHECK(wrong_elements_registered(*all_reduce, all_ranks(), world().rank(), Placement::one_rank_private, direct) ==
	      0);
	CHECK(direct == 0);
}

TEST_CASE("registered buffers in replica subgroups, and modes without shared memory")
{
	const int n = world().size();
	const int groups_count = n % 2 == 0 ? 2 : 1;
	GroupAssignment groups(static_cast<size_t>(groups_count));
	for (int r = 0; r < n; ++r)
		groups[static_cast<size_t>(r % groups_count)].push_back(r);
	const auto& mine = groups[static_cast<size_t>(world().rank() % groups_count)];
	const int position = world().rank() / groups_count;
	const Topology topology(world().comm(), std::nullopt);
	for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::hierarchical, AllReduceMode::naive}) {
		CAPTURE(all_reduce_mode_name(mode));
		auto all_reduce = make_all_reduce(topology, Device{}, mode, groups, small_chunks());
		CHECK(all_reduce->shares_buffers() == (mode == AllReduceMode::hierarchical));
		size_t direct = 0;
		CHECK(wrong_elements_registered(*all_reduce, mine, position, Placement::registered, direct) == 0);
		const bool expect_direct = mode == AllReduceMode::hierarchical && mine.size() > 1;
		CHECK(direct == (expect_direct ? runs_per_sweep : 0));
	}
}

TEST_CASE("bucket storage from the all-reduce is zeroed, in its window, and reduces in place")
{
	const Topology topology(world().comm(), std::nullopt);
	auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::hierarchical);
	const std::vector<TensorSpec> specs = {{"w", {33, 7}, DType::f32}, {"b", {7}, DType::f32}};
	const BucketPlan plan = plan_buckets(specs, size_t{1} << 20, 256);
	REQUIRE(plan.buckets.size() == 1);
	const Bucket& bucket = plan.buckets[0];
	Tensor storage = make_bucket_storage(bucket, Device{}, *all_reduce);
	CHECK(storage.bytes() == bucket.bytes);
	const std::vector<float> initial = storage.to_host_f32();
	CHECK(std::all_of(initial.begin(), initial.end(), [](float x) { return x == 0.0f; }));
	float* data = storage.data_as<float>();
	for (size_t i = 0; i < bucket.count(); ++i)
		data[i] = static_cast<float>(test::value_of(world().rank(), i));
	all_reduce->run_in_place(data, bucket.count(), DType::f32, ReduceOp::sum);
	CHECK(static_cast<const HierarchicalAllReduce&>(*all_reduce).last_run_was_direct() == (world().size() > 1));
	size_t wrong = 0;
	for (size_t i = 0; i < bucket.count(); ++i)
		wrong += data[i] != static_cast<float>(test::reference(all_ranks(), i, ReduceOp::sum, DType::f32));
	CHECK(wrong == 0);
}

TEST_CASE("large registered buffers take the direct path in many blocks, in and out of place")
{
	const Topology topology(world().comm(), std::nullopt);
	auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::hierarchical);
	const size_t count = (size_t{3} << 20) / 4 + 5; // many default-sized blocks and a partial one
	float* send = static_cast<float*>(all_reduce->allocate(count * 4));
	float* recv = static_cast<float*>(all_reduce->allocate(count * 4));
	for (bool in_place : {true, false}) {
		for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
			CAPTURE(in_place);
			CAPTURE(reduce_op_name(op));
			for (size_t i = 0; i < count; ++i)
				send[i] = static_cast<float>(test::value_of(world().rank(), i));
			float* out = in_place ? send : recv;
			all_reduce->run(send, out, count, DType::f32, op);
			// Every rank of the (real) node shares it, so with peers the run must not stage.
			CHECK(static_cast<const HierarchicalAllReduce&>(*all_reduce).last_run_was_direct() ==
			      (world().size() > 1));
			size_t wrong = 0;
			for (size_t i = 0; i < count; ++i) {
				const double want = test::reference(all_ranks(), i, op, DType::f32);
				wrong += std::abs(out[i] - want) > test::tolerance(DType::f32, op) * std::max(1.0, std::abs(want));
			}
			CHECK(wrong == 0);
		}
	}
	all_reduce->deallocate(recv);
	all_reduce->deallocate(send);
}

TEST_CASE("reduce_shard reduces exactly this rank's shard, over every simulated topology, and nothing else")
{
	for (int per_node = 1; per_node <= world().size(); ++per_node) {
		if (world().size() % per_node != 0)
			continue;
		CAPTURE(per_node);
		const Topology topology(world().comm(), per_node);
		auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::hierarchical, {}, small_chunks());
		NodeSharding* sharding = all_reduce->node_sharding();
		REQUIRE(sharding != nullptr);
		CHECK(sharding->node_size() == per_node);
		for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max})
			for (size_t count : {size_t{1}, size_t{61}, size_t{1000}}) {
				CAPTURE(count);
				float* data = static_cast<float*>(all_reduce->allocate(count * sizeof(float)));
				for (size_t i = 0; i < count; ++i)
					data[i] = static_cast<float>(test::value_of(world().rank(), i));
				const Segment shard = segment_of(count, static_cast<size_t>(per_node),
								 static_cast<size_t>(sharding->node_rank()));
				sharding->reduce_shard(data, count, DType::f32, op, shard);
				size_t wrong = 0;
				for (size_t i = 0; i < count; ++i) {
					const bool inside = i >= shard.start && i < shard.start + shard.length;
					const double want = inside ? test::reference(all_ranks(), i, op, DType::f32)
								   : test::value_of(world().rank(), i);
					wrong += std::abs(data[i] - want) > 1e-5 * std::max(1.0, std::abs(want));
				}
				CHECK(wrong == 0);
				// A peer may still read this buffer until every rank has reduced its shard.
				sharding->node_barrier();
				CHECK(wrong_in_peers(*sharding, data, count, op, per_node) == 0);
				// No rank frees its window while a peer may still be reading it.
				sharding->node_barrier();
				all_reduce->deallocate(data);
			}
		CHECK_THROWS_WITH_AS(sharding->peer_address(&per_node, 0),
				     doctest::Contains("is not inside memory from this all-reduce's allocate()"), Error);
	}
}

TEST_CASE("reduce_shard and peer_address refuse a shard or a node rank out of range")
{
	const Topology topology(world().comm(), std::nullopt);
	auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::hierarchical, {}, small_chunks());
	NodeSharding* sharding = all_reduce->node_sharding();
	REQUIRE(sharding != nullptr);
	const size_t count = 10;
	float* data = static_cast<float*>(all_reduce->allocate(count * sizeof(float)));
	// Every rank passes the same bad shard, so every rank throws before the first barrier.
	CHECK_THROWS_WITH_AS(sharding->reduce_shard(data, count, DType::f32, ReduceOp::sum, Segment{9, 2}),
			     doctest::Contains("shard [9, 11) outside a buffer of 10 elements"), Error);
	CHECK_THROWS_WITH_AS(sharding->reduce_shard(data, count, DType::f32, ReduceOp::sum, Segment{11, 0}),
			     doctest::Contains("shard [11, 11) outside a buffer of 10 elements"), Error);
	const int n = sharding->node_size();
	CHECK_THROWS_WITH_AS(sharding->peer_address(data, n),
			     doctest::Contains(fmt::format("node rank {} outside [0, {})", n, n).c_str()), Error);
	CHECK_THROWS_WITH_AS(sharding->peer_address(data, -1),
			     doctest::Contains(fmt::format("node rank -1 outside [0, {})", n).c_str()), Error);
	// With peers on the node, a buffer of ordinary memory is one they cannot reach.
	if (n > 1) {
		std::vector<float> ordinary(count);
		const Segment shard = segment_of(count, static_cast<size_t>(n), static_cast<size_t>(sharding->node_rank()));
		CHECK_THROWS_WITH_AS(sharding->reduce_shard(ordinary.data(), count, DType::f32, ReduceOp::sum, shard),
				     doctest::Contains("is not inside memory from this all-reduce's allocate()"), Error);
	}
	all_reduce->deallocate(data);
}

TEST_CASE("freeing memory an all-reduce did not allocate is an error in every mode")
{
	const Topology topology(world().comm(), std::nullopt);
	for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::hierarchical, AllReduceMode::naive}) {
		CAPTURE(all_reduce_mode_name(mode));
		auto all_reduce = make_all_reduce(topology, Device{}, mode);
		auto other = make_all_reduce(topology, Device{}, mode);
		const auto not_ours = doctest::Contains("of memory this all-reduce did not allocate");
		std::vector<char> ordinary(64);
		CHECK_THROWS_WITH_AS(all_reduce->deallocate(ordinary.data()), not_ours, Error);
		char* mine = static_cast<char*>(all_reduce->allocate(64));
		char* theirs = static_cast<char*>(other->allocate(64));
		CHECK_THROWS_WITH_AS(all_reduce->deallocate(theirs), not_ours, Error);
		CHECK_THROWS_WITH_AS(all_reduce->deallocate(mine + 8), not_ours, Error); // inside, not the start
		all_reduce->deallocate(mine);
		CHECK_THROWS_WITH_AS(all_reduce->deallocate(mine), not_ours, Error); // a second time
		other->deallocate(theirs);
	}
}

TEST_CASE("a registered send buffer with an ordinary receive buffer reduces through the staged path")
{
	const Topology topology(world().comm(), std::nullopt);
	auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::hierarchical, {}, small_chunks());
	const auto& hierarchical = static_cast<const HierarchicalAllReduce&>(*all_reduce);
	const size_t count = 1000;
	float* send = static_cast<float*>(all_reduce->allocate(count * sizeof(float)));
	float* recv_registered = static_cast<float*>(all_reduce->allocate(count * sizeof(float)));
	std::vector<float> recv_ordinary(count);
	// Every rank's receive buffer ordinary, then only rank 0's: either way no rank may write
	// into a peer's receive buffer directly, since one of them is not in the window.
	for (bool everyone : {true, false}) {
		CAPTURE(everyone);
		float* recv = everyone || world().rank() == 0 ? recv_ordinary.data() : recv_registered;
		for (size_t i = 0; i < count; ++i) {
			send[i] = static_cast<float>(test::value_of(world().rank(), i));
			recv[i] = -99.0f;
		}
		all_reduce->run(send, recv, count, DType::f32, ReduceOp::sum);
		CHECK_FALSE(hierarchical.last_run_was_direct());
		size_t wrong = 0, send_changed = 0;
		for (size_t i = 0; i < count; ++i) {
			wrong += recv[i] != static_cast<float>(test::reference(all_ranks(), i, ReduceOp::sum, DType::f32));
			send_changed += send[i] != static_cast<float>(test::value_of(world().rank(), i));
		}
		CHECK(wrong == 0);
		CHECK(send_changed == 0);
	}
	// The choice is made per run: registered buffers on every rank go direct again.
	all_reduce->run(send, recv_registered, count, DType::f32, ReduceOp::sum);
	CHECK(hierarchical.last_run_was_direct() == (world().size() > 1));
	all_reduce->deallocate(recv_registered);
	all_reduce->deallocate(send);
}

TEST_CASE("integer mean through the hierarchical path is exact and truncates toward zero")
{
	const size_t count = 61; // many 64-byte chunks, and shards of unequal length
	for (int per_node = 1; per_node <= world().size(); ++per_node) {
		if (world().size() % per_node != 0)
			continue;
		CAPTURE(per_node);
		const Topology topology(world().comm(), per_node);
		auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::hierarchical, {}, small_chunks());
		for (bool registered : {false, true}) {
			CAPTURE(registered);
			CHECK(integer_mean_wrong<int32_t>(*all_reduce, count, registered) == 0);
			CHECK(integer_mean_wrong<int64_t>(*all_reduce, count, registered) == 0);
		}
	}
}
