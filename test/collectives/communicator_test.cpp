// The MPI communicator's collectives against a float64 reference, and the 16-bit conversions.
#include <doctest/doctest.h>

#include <numeric>

#include "collectives/communicator.h"
#include "runtime/base/half.h"
#include "runtime/base/error.h"
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

TEST_CASE("device buffers need a CUDA build or a GPU")
{
	// In a CPU build this throws at once; with CUDA but no GPU, creating the NCCL communicator fails.
	if (!TOWER_HAVE_CUDA)
		CHECK_THROWS_AS(make_communicator(world().comm(), Device{DeviceKind::cuda, 0}), Error);
}
