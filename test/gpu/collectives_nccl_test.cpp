// NCCL all-reduce and the batched pack kernel on a GPU, against host float64 math (skips without a GPU).
#include <doctest/doctest.h>

#include "collectives/all_reduce.h"
#include "collectives/bucket_plan.h"
#include "collectives/pack.h"
#include "runtime/base/memory.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

TEST_CASE("NCCL ring and hierarchical all-reduce of f32 on the GPU")
{
	const Topology topology(world().comm(), std::nullopt);
	const Device gpu{DeviceKind::cuda, 0};
	const size_t count = 1001;
	for (AllReduceMode mode : {AllReduceMode::ring, AllReduceMode::hierarchical, AllReduceMode::naive}) {
		CAPTURE(all_reduce_mode_name(mode));
		auto all_reduce = make_all_reduce(topology, gpu, mode);
		std::vector<float> host(count);
		for (size_t i = 0; i < count; ++i)
			host[i] = static_cast<float>(i % 11) - 5.0f;
		void* data = device_alloc(gpu, count * 4);
		copy_bytes(data, gpu, host.data(), Device{}, count * 4);
		all_reduce->run_in_place(data, count, DType::f32, ReduceOp::sum);
		copy_bytes(host.data(), Device{}, data, gpu, count * 4);
		device_free(gpu, data);
		size_t wrong = 0;
		for (size_t i = 0; i < count; ++i)
			wrong += static_cast<double>(host[i]) != (static_cast<double>(i % 11) - 5.0) * world().size();
		CHECK(wrong == 0);
	}
}

TEST_CASE("bucket pack and unpack on the GPU in one launch")
{
	const Device gpu{DeviceKind::cuda, 0};
	const std::vector<TensorSpec> specs = {{"a", {3}, DType::f32}, {"b", {1000}, DType::f32}, {"c", {1}, DType::f32}};
	const BucketPlan plan = plan_buckets(specs, size_t{1} << 20, 256);
	REQUIRE(plan.buckets.size() == 1);
	std::vector<Tensor> tensors, back;
	for (const auto& s : specs) {
		std::vector<float> values(static_cast<size_t>(shape_numel(s.shape)));
		for (size_t i = 0; i < values.size(); ++i)
			values[i] = static_cast<float>(i) + static_cast<float>(s.name[0]);
		tensors.push_back(Tensor::from_host(values, s.shape, gpu));
		back.push_back(Tensor::zeros(s.shape, DType::f32, gpu));
	}
	Tensor storage = make_bucket_storage(plan.buckets[0], gpu);
	pack_bucket(plan.buckets[0], tensors, storage);
	unpack_bucket(plan.buckets[0], storage, back);
	for (size_t t = 0; t < specs.size(); ++t)
		CHECK(back[t].to_host_f32() == tensors[t].to_host_f32());
}
