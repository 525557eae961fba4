// The post-init broadcast: root's values arrive everywhere; a signature mismatch fails on every rank.
#include <doctest/doctest.h>

#include "collectives/broadcast_named.h"
#include "base/error.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

std::vector<NamedTensor> make_state(float base, int64_t bias_size)
{
	const Device cpu;
	std::vector<NamedTensor> out;
	out.push_back({"w", Tensor::from_host(std::vector<float>(6, base), {2, 3}, cpu)});
	out.push_back({"b", Tensor::from_host(std::vector<float>(static_cast<size_t>(bias_size), base + 1), {bias_size}, cpu)});
	out.push_back({"step", Tensor::zeros({1}, DType::i64, cpu)});
	out.back().tensor.data_as<int64_t>()[0] = static_cast<int64_t>(base);
	return out;
}

} // namespace

TEST_CASE("broadcast_named copies root's tensors to every rank")
{
	const Topology topology(world().comm(), std::nullopt);
	auto state = make_state(static_cast<float>(world().rank() * 10), 3);
	broadcast_named(topology, state, 0);
	CHECK(state[0].tensor.to_host_f32() == std::vector<float>(6, 0.0f));
	CHECK(state[1].tensor.to_host_f32() == std::vector<float>(3, 1.0f));
	CHECK(state[2].tensor.data_as<int64_t>()[0] == 0);
}

TEST_CASE("a signature mismatch is an AgreedError on every rank naming the entry")
{
	if (world().size() < 2)
		return;
	const Topology topology(world().comm(), std::nullopt);
	// The last rank's bias has another shape.
	const bool odd_one = world().rank() == world().size() - 1;
	auto state = make_state(1.0f, odd_one ? 4 : 3);
	CHECK_THROWS_WITH_AS(broadcast_named(topology, state, 0), doctest::Contains("entry 1 is 'b f32 [4]'"),
			     AgreedError);
	// Nothing moved.
	CHECK(state[0].tensor.to_host_f32() == std::vector<float>(6, 1.0f));

	auto renamed = make_state(1.0f, 3);
	if (odd_one)
		renamed[2].name = "steps";
	CHECK_THROWS_WITH_AS(broadcast_named(topology, renamed, 0), doctest::Contains("steps"), AgreedError);
}
