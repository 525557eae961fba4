// Bucket plans (order, dtypes, threshold, alignment), pack/unpack round trips and view mode.
#include <doctest/doctest.h>

#include <set>

#include "collectives/all_reduce.h"
#include "collectives/fusion/bucket_plan.h"
#include "collectives/fusion/pack.h"
#include "base/error.h"
#include "base/tensor/half.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

std::vector<TensorSpec> model_like_specs()
{
	return {
		{"fc1.weight", {10, 30}, DType::f32}, // 1200 B
		{"fc1.bias", {30}, DType::f32},       // 120 B
		{"emb", {5, 3}, DType::f16},          // 30 B
		{"fc2.weight", {30, 3}, DType::f32},  // 360 B
		{"empty", {0}, DType::f32},
		{"fc2.bias", {3}, DType::f32},        // 12 B
	};
}

} // namespace

TEST_CASE("plan: reverse order, one dtype per bucket, threshold and alignment")
{
	const auto specs = model_like_specs();
	const BucketPlan plan = plan_buckets(specs, 512, 64);
	std::set<size_t> seen;
	for (const Bucket& b : plan.buckets) {
		CHECK(b.bytes % 64 == 0);
		size_t previous = specs.size();
		for (const BucketMember& m : b.members) {
			CHECK(specs[m.tensor].dtype == b.dtype);
			CHECK(m.offset % 64 == 0);
			CHECK(m.offset + m.bytes <= b.bytes);
			CHECK(m.bytes == specs[m.tensor].bytes());
			CHECK(m.tensor < previous); // reverse registration order inside a bucket
			previous = m.tensor;
			CHECK(seen.insert(m.tensor).second);
		}
		// Over the threshold only when a single tensor is.
		if (b.members.size() > 1)
			CHECK(b.members.back().offset + b.members.back().bytes <= 512);
	}
	CHECK(seen.size() == specs.size());
	// The last-registered tensor is in the first bucket; the 1200 B weight stands alone.
	CHECK(plan.buckets.front().members.front().tensor == 5);
	for (const Bucket& b : plan.buckets)
		for (const BucketMember& m : b.members)
			if (m.tensor == 0)
				CHECK(b.members.size() == 1);
}

TEST_CASE("plan: threshold 0 disables fusion; a large threshold fuses per dtype")
{
	const auto specs = model_like_specs();
	CHECK(plan_buckets(specs, 0, 8).buckets.size() == specs.size());
	const BucketPlan fused = plan_buckets(specs, size_t{25} << 20, 256);
	REQUIRE(fused.buckets.size() == 2);
	CHECK(fused.buckets[0].dtype == DType::f32);
	CHECK(fused.buckets[0].members.size() == 5);
	CHECK(fused.buckets[1].dtype == DType::f16);
	CHECK_THROWS_AS(plan_buckets(specs, 100, 12), AgreedError);
	CHECK_THROWS_AS(plan_buckets(specs, 100, 0), AgreedError);
}

TEST_CASE("pack, all-reduce and unpack round trip; view mode aliases the bucket")
{
	const auto specs = model_like_specs();
	const BucketPlan plan = plan_buckets(specs, 512, 64);
	const Device cpu;
	// f32 element i of rank r is i % 9 + r; f16 element i is r - (i % 7) / 4, exact in f16 and
	// with an exact sum and mean over 1 to 4 ranks (multiples of 1/4 below 16).
	const auto f16_value = [](int64_t i, float rank) { return rank - static_cast<float>(i % 7) / 4.0f; };
	std::vector<Tensor> grads;
	for (const auto& s : specs) {
		grads.push_back(Tensor::zeros(s.shape, s.dtype, cpu));
		for (int64_t i = 0; i < grads.back().numel(); ++i)
			if (s.dtype == DType::f32)
				grads.back().data_as<float>()[i] = static_cast<float>(i % 9) + static_cast<float>(world().rank());
			else
				grads.back().data_as<uint16_t>()[i] = f32_to_f16(f16_value(i, static_cast<float>(world().rank())));
	}
	const Topology topology(world().comm(), std::nullopt);
	auto all_reduce = make_all_reduce(topology, cpu, AllReduceMode::ring);
	const int n = world().size();
	for (const Bucket& b : plan.buckets) {
		Tensor storage = make_bucket_storage(b, cpu);
		pack_bucket(b, grads, storage);
		all_reduce->run_in_place(storage.data(), b.count(), b.dtype, ReduceOp::mean);
		unpack_bucket(b, storage, grads);
		const auto views = bucket_views(b, storage, specs);
		REQUIRE(views.size() == b.members.size());
		for (size_t k = 0; k < views.size(); ++k) {
			CHECK(views[k].data() == storage.data_as<char>() + b.members[k].offset);
			CHECK(views[k].shape() == specs[b.members[k].tensor].shape);
		}
	}
	size_t wrong = 0, checked_f16 = 0;
	const float mean_rank = static_cast<float>(n - 1) / 2.0f;
	for (size_t t = 0; t < specs.size(); ++t) {
		const std::vector<float> got = grads[t].to_host_f32();
		for (size_t i = 0; i < got.size(); ++i) {
			const auto k = static_cast<int64_t>(i);
			const bool f16 = specs[t].dtype == DType::f16;
			wrong += got[i] != (f16 ? f16_value(k, mean_rank) : static_cast<float>(k % 9) + mean_rank);
			checked_f16 += f16 ? 1 : 0;
		}
	}
	CHECK(wrong == 0);
	CHECK(checked_f16 == 15); // the 5x3 f16 tensor went through its own bucket too
}
