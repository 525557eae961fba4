// The MPI communicator's collectives against a float64 reference, and the 16-bit conversions.
#include <doctest/doctest.h>

#include <numeric>

#include "collectives/transports/communicator.h"
#include "base/tensor/half.h"
#include "base/error.h"
#include "base/device/gpu_runtime.h"
#include "base/tensor/memory.h"
#include "tower_config.h"
#include "test/collectives/check_data.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

std::vector<int> all_ranks()
{
	std::vector<int> ranks(static_cast<size_t>(world().size()));
	std::iota(ranks.begin(), ranks.end(), 0);
	return ranks;
}

constexpr DType all_dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

} // namespace

TEST_CASE("16-bit conversions round to nearest even")
{
	for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f})
		CHECK(f16_to_f32(f32_to_f16(v)) == v);
	CHECK(f16_to_f32(f32_to_f16(1.0f + 1.0f / 4096)) == 1.0f); // half an ulp, ties to even
	CHECK(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
	CHECK(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
	CHECK(bf16_to_f32(f32_to_bf16(-3.0f)) == -3.0f);
}

TEST_CASE("MPI communicator: reduce-scatter, all-gather, broadcast, all-reduce")
{
	auto comm = make_communicator(world().comm(), Device{});
	const int n = comm->size(), me = comm->rank();
	for (DType dtype : all_dtypes)
		for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{61}}) {
			CAPTURE(dtype_name(dtype));
			CAPTURE(count);
			const size_t esize = dtype_size(dtype), total = count * static_cast<size_t>(n);
			std::vector<double> mine(total);
			for (size_t i = 0; i < total; ++i)
				mine[i] = test::value_of(me, i);
			const std::vector<char> send = test::encode(mine, dtype);

			std::vector<char> block(count * esize);
			comm->reduce_scatter(send.data(), block.data(), count, dtype, ReduceOp::sum);
			size_t wrong = 0;
			for (size_t i = 0; i < count; ++i)
				wrong += test::decode(block.data() + i * esize, dtype) !=
					 test::reference(all_ranks(), static_cast<size_t>(me) * count + i, ReduceOp::sum, dtype);
			CHECK(wrong == 0);

			std::vector<char> gathered(total * esize);
			comm->all_gather(send.data(), gathered.data(), count, dtype);
			wrong = 0;
			for (size_t i = 0; i < total; ++i)
				wrong += test::decode(gathered.data() + i * esize, dtype) !=
					 test::value_of(static_cast<int>(i / std::max<size_t>(count, 1)), i % std::max<size_t>(count, 1));
			CHECK(wrong == 0);

			std::vector<char> data = send;
			const int root = n - 1;
			comm->broadcast(data.data(), total, dtype, root);
			wrong = 0;
			for (size_t i = 0; i < total; ++i)
				wrong += test::decode(data.data() + i * esize, dtype) != test::value_of(root, i);
			CHECK(wrong == 0);

			data = send;
			comm->all_reduce(data.data(), data.data(), total, dtype, ReduceOp::max);
			wrong = 0;
			for (size_t i = 0; i < total; ++i)
				wrong += test::decode(data.data() + i * esize, dtype) != test::reference(all_ranks(), i, ReduceOp::max, dtype);
			CHECK(wrong == 0);
		}
	comm->barrier();
}

TEST_CASE("device buffers need a CUDA build and a GPU")
{
	const Device gpu0{DeviceKind::cuda, 0};
	if (!TOWER_HAVE_CUDA) {
		CHECK_THROWS_WITH_AS(make_communicator(world().comm(), gpu0),
				     doctest::Contains("tower was built without CUDA"), Error);
		return;
	}
	// Every rank of these tests is on one host, so every rank sees the same number of GPUs.
	if (probe_gpu_runtime().device_count == 0) {
		// Selecting the device fails before NCCL is reached.
		CHECK_THROWS_WITH_AS(make_communicator(world().comm(), gpu0), doctest::Contains("cudaSetDevice(0) failed"),
				     Error);
		return;
	}
	if (world().size() > 1) {
		// Several ranks may share one GPU here, which NCCL refuses; one rank is enough for this check.
		MESSAGE("skipped at " << world().size() << " ranks: the NCCL communicator is checked at one rank only");
		return;
	}
	// One rank with a GPU: a real NCCL communicator, and an all-reduce through device memory.
	auto comm = make_communicator(world().comm(), gpu0);
	CHECK(comm->rank() == 0);
	CHECK(comm->size() == 1);
	CHECK(comm->device().name() == "cuda:0");
	const std::vector<float> host = {1.5f, -2.0f, 3.25f};
	std::vector<float> back(host.size(), 0.0f);
	void* data = device_alloc(gpu0, host.size() * sizeof(float));
	copy_bytes(data, gpu0, host.data(), Device{}, host.size() * sizeof(float));
	comm->all_reduce(data, data, host.size(), DType::f32, ReduceOp::sum);
	copy_bytes(back.data(), Device{}, data, gpu0, back.size() * sizeof(float));
	device_free(gpu0, data);
	CHECK(back == host);
}
