// NCCL collectives and the batched pack kernel on the GPU: out of place into poisoned buffers,
// rank-dependent data, and ordering after a slow producer kernel (skips without a GPU per rank).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/fusion/bucket_plan.h"
#include "collectives/transports/communicator.h"
#include "collectives/fusion/pack.h"
#include "base/tensor/memory.h"
#include "test/gpu/gpu_device.h"
#include "test/gpu/slow_kernel.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::gpu;
using tower::test::world;

namespace {

// Small integers, different on every rank, so sums are exact in f32 and a collective that
// returned one rank's data (or its input) instead of the reduction is caught.
float value(int rank, size_t i)
{
	return static_cast<float>(static_cast<int>(i % 11) - 5) * static_cast<float>(rank + 1) + static_cast<float>(rank);
}

// A device buffer of `count` floats.
struct DeviceFloats {
	DeviceFloats(const Device& d, size_t n) : device(d), count(n), data(device_alloc(d, n * sizeof(float))) {}
	~DeviceFloats() { device_free(device, data); }
	DeviceFloats(const DeviceFloats&) = delete;
	DeviceFloats& operator=(const DeviceFloats&) = delete;

	void set(const std::vector<float>& host) { copy_bytes(data, device, host.data(), Device{}, host.size() * 4); }
	void poison() { set(std::vector<float>(count, std::numeric_limits<float>::quiet_NaN())); }
	std::vector<float> get() const
	{
		std::vector<float> host(count);
		copy_bytes(host.data(), Device{}, data, device, count * 4);
		return host;
	}
	float* floats() const { return static_cast<float*>(data); }

	Device device;
	size_t count;
	void* data;
};

std::vector<float> rank_data(int rank, size_t count)
{
	std::vector<float> host(count);
	for (size_t i = 0; i < count; ++i)
		host[i] = value(rank, i);
	return host;
}

size_t mismatches(const std::vector<float>& got, const std::vector<float>& want)
{
	size_t wrong = got.size() == want.size() ? 0 : 1;
	for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
		wrong += !(got[i] == want[i]); // NaN from the poison never compares equal
	return wrong;
}

} // namespace

TEST_CASE("NCCL ring, hierarchical and naive all-reduce out of place into a poisoned buffer")
{
	const Topology topology(world().comm(), std::nullopt);
	const Device g = gpu();
	const int rank = world().rank(), size = world().size();
	const size_t count = 1001; // odd: the hierarchical mode's remainder path at several ranks
	std::vector<float> sum(count), mine = rank_data(rank, count);
	for (size_t i = 0; i < count; ++i)
		for (int r = 0; r < size; ++r)
			sum[i] += value(r, i);
	for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::hierarchical, AllReduceMode::naive}) {
		CAPTURE(all_reduce_mode_name(mode));
		auto all_reduce = make_all_reduce(topology, g, mode);
		DeviceFloats send(g, count), recv(g, count);
		send.set(mine);
		recv.poison();
		all_reduce->run(send.data, recv.data, count, DType::f32, ReduceOp::sum);
		CHECK(mismatches(recv.get(), sum) == 0);
		CHECK(mismatches(send.get(), mine) == 0); // the input is left alone

		recv.poison();
		all_reduce->run(send.data, recv.data, count, DType::f32, ReduceOp::mean);
		std::vector<float> mean(sum);
		for (float& v : mean)
			v /= static_cast<float>(size);
		const std::vector<float> got = recv.get();
		size_t far = 0;
		for (size_t i = 0; i < count; ++i)
			far += !(std::abs(got[i] - mean[i]) <= 1e-6f * (1.0f + std::abs(mean[i])));
		CHECK(far == 0);

		all_reduce->run_in_place(send.data, count, DType::f32, ReduceOp::sum);
		CHECK(mismatches(send.get(), sum) == 0);
	}
}

TEST_CASE("NCCL reduce-scatter, all-gather and broadcast through the communicator, out of place")
{
	const Device g = gpu();
	const int rank = world().rank(), size = world().size();
	auto comm = make_communicator(world().comm(), g);
	const size_t block = 257, whole = block * static_cast<size_t>(size);

	DeviceFloats send(g, whole), recv(g, block);
	send.set(rank_data(rank, whole));
	recv.poison();
	comm->reduce_scatter(send.data, recv.data, block, DType::f32, ReduceOp::sum);
	std::vector<float> want(block);
	for (size_t i = 0; i < block; ++i)
		for (int r = 0; r < size; ++r)
			want[i] += value(r, static_cast<size_t>(rank) * block + i);
	CHECK(mismatches(recv.get(), want) == 0);

	DeviceFloats part(g, block), gathered(g, whole);
	part.set(rank_data(rank, block));
	gathered.poison();
	comm->all_gather(part.data, gathered.data, block, DType::f32);
	std::vector<float> all;
	for (int r = 0; r < size; ++r) {
		const auto v = rank_data(r, block);
		all.insert(all.end(), v.begin(), v.end());
	}
	CHECK(mismatches(gathered.get(), all) == 0);

	const int root = size - 1;
	DeviceFloats data(g, block);
	data.set(rank_data(rank, block));
	comm->broadcast(data.data, block, DType::f32, root);
	CHECK(mismatches(data.get(), rank_data(root, block)) == 0);
}

// The collectives run on NCCL's own stream; the slow kernel on the default stream. Without the
// event that orders the one after the other, NCCL copies the zeros that were there before.
TEST_CASE("a collective waits for the slow kernel that produced its input (one GPU is enough)")
{
	const Topology topology(world().comm(), std::nullopt);
	const Device g = gpu();
	const int rank = world().rank(), size = world().size();
	auto comm = make_communicator(world().comm(), g);
	auto ring = make_all_reduce(topology, g, AllReduceMode::ring);
	const size_t count = size_t{1} << 18;
	const float first = 1.0f + static_cast<float>(rank);
	std::vector<float> produced(count), summed(count);
	for (size_t i = 0; i < count; ++i) {
		produced[i] = first + static_cast<float>(i);
		for (int r = 0; r < size; ++r)
			summed[i] += 1.0f + static_cast<float>(r) + static_cast<float>(i);
	}
	DeviceFloats send(g, count), recv(g, count), gathered(g, count * static_cast<size_t>(size));

	auto produce = [&] {
		zero_bytes(send.data, g, count * 4);
		wait_thread_stream(g);
		REQUIRE(tower::test::launch_slow_fill(send.floats(), count, first, 1.0f, 200) == 0);
	};

	SUBCASE("communicator all-reduce")
	{
		recv.poison();
		produce();
		comm->all_reduce(send.data, recv.data, count, DType::f32, ReduceOp::sum);
		CHECK(mismatches(recv.get(), summed) == 0);
	}
	SUBCASE("ring all-reduce, as the gradient buckets use it")
	{
		recv.poison();
		produce();
		ring->run(send.data, recv.data, count, DType::f32, ReduceOp::sum);
		CHECK(mismatches(recv.get(), summed) == 0);
	}
	SUBCASE("all-gather")
	{
		gathered.poison();
		produce();
		comm->all_gather(send.data, gathered.data, count, DType::f32);
		const std::vector<float> got = gathered.get();
		CHECK(mismatches(std::vector<float>(got.begin() + static_cast<std::ptrdiff_t>(rank * count),
						    got.begin() + static_cast<std::ptrdiff_t>((rank + 1) * count)),
				 produced) == 0);
	}
}

TEST_CASE("bucket pack and unpack on the GPU, in one launch and in several")
{
	const Device g = gpu();
	std::vector<TensorSpec> specs = {{"a", {3}, DType::f32}, {"b", {1000}, DType::f32}, {"c", {1}, DType::f32}};
	SUBCASE("three members: one launch") {}
	SUBCASE("300 members: three launches of at most 128 copies")
	{
		for (int i = 0; i < 297; ++i)
			specs.push_back({fmt::format("m{}", i), {1 + i % 7}, DType::f32});
	}
	const BucketPlan plan = plan_buckets(specs, size_t{1} << 20, 256);
	REQUIRE(plan.buckets.size() == 1);
	std::vector<Tensor> tensors, back;
	for (const auto& s : specs) {
		std::vector<float> values(static_cast<size_t>(shape_numel(s.shape)));
		for (size_t i = 0; i < values.size(); ++i)
			values[i] = static_cast<float>(i) + static_cast<float>(s.name[0]);
		tensors.push_back(Tensor::from_host(values, s.shape, g));
		back.push_back(Tensor::zeros(s.shape, DType::f32, g));
	}
	Tensor storage = make_bucket_storage(plan.buckets[0], g);
	pack_bucket(plan.buckets[0], tensors, storage);
	unpack_bucket(plan.buckets[0], storage, back);
	for (size_t t = 0; t < specs.size(); ++t)
		CHECK(back[t].to_host_f32() == tensors[t].to_host_f32());
}
