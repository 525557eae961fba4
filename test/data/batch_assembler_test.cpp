// ImageBatch assembler tests: a shard's samples land in the right tensor rows, in reused buffers.
#include <vector>

#include <doctest/doctest.h>

#include "data/batch_assembler.h"
#include "base/error.h"
#include "test/harness/mpi_main.h"

using namespace tower;

namespace {

// Six 28x28 samples; pixel j of sample i is i + j / 1000, label is 9 - i.
Dataset tiny_dataset()
{
	Dataset d;
	d.count = 6;
	d.rows = 28;
	d.cols = 28;
	for (int i = 0; i < 6; ++i) {
		for (int j = 0; j < 784; ++j)
			d.images.push_back(static_cast<float>(i) + static_cast<float>(j) / 1000.0f);
		d.labels.push_back(9 - i);
	}
	return d;
}

void check_batch(const ImageBatch& b, const std::vector<int64_t>& indices)
{
	CHECK(b.images.shape() == Shape{3, 1, 28, 28});
	CHECK(b.labels.shape() == Shape{3});
	CHECK(b.labels.dtype() == DType::i32);
	const auto pixels = b.images.to_host_f32();
	for (size_t r = 0; r < indices.size(); ++r) {
		const auto sample = static_cast<float>(indices[r]);
		CHECK(pixels[r * 784] == sample);
		CHECK(pixels[r * 784 + 783] == sample + 0.783f);
		CHECK(b.labels.data_as<int32_t>()[r] == 9 - indices[r]);
	}
}

} // namespace

TEST_CASE("a shard is gathered row by row, and the buffers are reused across steps")
{
	const Dataset d = tiny_dataset();
	BatchAssembler assembler(d, 3, Device{});
	const std::vector<int64_t> first = {4, 0, 5}, second = {1, 1, 2};
	const ImageBatch& a = assembler.assemble(first);
	const void* images = a.images.data();
	const void* labels = a.labels.data();
	check_batch(a, first);
	const ImageBatch& b = assembler.assemble(second);
	check_batch(b, second);
	CHECK(b.images.data() == images);
	CHECK(b.labels.data() == labels);
}

TEST_CASE("a shard of the wrong size or with an index outside the dataset is an error")
{
	const Dataset d = tiny_dataset();
	BatchAssembler assembler(d, 3, Device{});
	const std::vector<int64_t> two = {0, 1}, outside = {0, 1, 6};
	CHECK_THROWS_AS(assembler.assemble(two), Error);
	CHECK_THROWS_WITH_AS(assembler.assemble(outside), doctest::Contains("sample index 6 outside a data set of 6"),
			     Error);
	CHECK_THROWS_AS(BatchAssembler(d, 0, Device{}), AgreedError);
}
