// --deterministic: every all-reduce mode, on every simulated node layout, gives the bits of a sum
// taken in rank order.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/algorithms/reduce_host.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

// Values of wildly different magnitudes, so that another summation order rounds differently.
std::vector<float> values_of(int rank, size_t count)
{
	std::mt19937 random(static_cast<unsigned>(1000 + rank));
	std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
	std::uniform_int_distribution<int> exponent(-20, 20);
	std::vector<float> v(count);
	for (float& x : v)
		x = std::ldexp(mantissa(random), exponent(random));
	return v;
}

// ((x0 + x1) + x2) + ... over every rank's values, as the deterministic mode promises.
std::vector<float> in_rank_order(size_t count, ReduceOp op)
{
	std::vector<float> sum = values_of(0, count);
	for (int r = 1; r < world().size(); ++r) {
		const auto next = values_of(r, count);
		for (size_t i = 0; i < count; ++i)
			sum[i] += next[i];
	}
	if (op == ReduceOp::mean)
		divide_host(sum.data(), count, DType::f32, world().size());
	return sum;
}

AllReduceOptions deterministic(size_t chunk_bytes)
{
	AllReduceOptions o;
	o.deterministic = true;
	o.chunk_bytes = chunk_bytes;
	return o;
}

} // namespace

TEST_CASE("deterministic all-reduce: every mode and node layout gives the rank-order sum, bit for bit")
{
	constexpr size_t count = 1001; // not divisible by 2, 3 or 4
	for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
		const auto want = in_rank_order(count, op);
		for (int per_node = 1; per_node <= world().size(); ++per_node) {
			if (world().size() % per_node != 0)
				continue;
			const Topology topology(world().comm(), per_node);
			for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::hierarchical, AllReduceMode::naive})
				for (size_t chunk : {size_t{64}, size_t{1} << 20})
					for (bool in_place : {true, false}) {
						CAPTURE(per_node);
						CAPTURE(all_reduce_mode_name(mode));
						CAPTURE(chunk);
						CAPTURE(in_place);
						auto all_reduce = make_all_reduce(topology, Device{}, mode, {}, deterministic(chunk));
						CHECK(all_reduce->mode() == mode);
						auto send = values_of(world().rank(), count);
						std::vector<float> recv(count, -1.0f);
						float* out = in_place ? send.data() : recv.data();
						all_reduce->run(send.data(), out, count, DType::f32, op);
						CHECK(std::memcmp(out, want.data(), count * sizeof(float)) == 0);
					}
		}
	}
}

TEST_CASE("deterministic all-reduce: empty buffers and more ranks than elements")
{
	const Topology topology(world().comm(), std::nullopt);
	auto all_reduce = make_all_reduce(topology, Device{}, AllReduceMode::ring, {}, deterministic(64));
	for (size_t count : {size_t{0}, size_t{1}, size_t{2}}) {
		CAPTURE(count);
		auto send = values_of(world().rank(), count);
		const auto want = in_rank_order(count, ReduceOp::sum);
		all_reduce->run_in_place(send.data(), count, DType::f32, ReduceOp::sum);
		// Bitwise; memcmp must not see an empty vector's null data.
		CHECK((count == 0 || std::memcmp(send.data(), want.data(), count * sizeof(float)) == 0));
	}
}
