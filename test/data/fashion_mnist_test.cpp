// Fashion-MNIST loader tests on small generated files, its cross-file checks, and the real files.
#include <array>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

#include "data/fashion_mnist.h"
#include "base/error.h"
#include "test/data/idx_fixture.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::IdxContent;
using tower::test::TempDir;
using tower::test::world;

namespace {

std::string load_error(const std::string& dir, Split split)
{
	try {
		load_fashion_mnist(dir, split);
	} catch (const Error& e) {
		return e.what();
	}
	FAIL("loading raised no error");
	return "";
}

void write_labels(const std::string& path, std::vector<uint8_t> labels)
{
	IdxContent c{.dims = {static_cast<uint32_t>(labels.size())}, .data = std::move(labels)};
	test::write_file(path, test::idx_bytes(c));
}

} // namespace

TEST_CASE("small Fashion-MNIST files load as pixels / 255 and int labels")
{
	TempDir dir;
	test::write_fashion_files(dir.path(), "t10k", 5);
	const Dataset d = load_fashion_mnist(dir.path(), Split::test);
	CHECK(d.count == 5);
	CHECK(d.rows == 28);
	CHECK(d.cols == 28);
	REQUIRE(d.images.size() == 5 * 784);
	for (size_t i = 0; i < 5; ++i)
		for (size_t j = 0; j < 784; j += 97)
			CHECK(d.images[i * 784 + j] == static_cast<float>((i * 7 + j) % 256) / 255.0f);
	CHECK(d.labels == std::vector<int32_t>{0, 1, 2, 3, 4});
	CHECK_THROWS_WITH_AS(load_fashion_mnist(dir.path(), Split::train), doctest::Contains("train-images-idx3-ubyte.gz"),
			     Error);
}

TEST_CASE("image and label counts must agree")
{
	TempDir dir;
	test::write_fashion_files(dir.path(), "train", 4);
	write_labels(dir.file("train-labels-idx1-ubyte.gz"), {1, 2, 3});
	const std::string message = load_error(dir.path(), Split::train);
	CHECK(message.find("has 3 labels but") != std::string::npos);
	CHECK(message.find("train-images-idx3-ubyte.gz has 4 images") != std::string::npos);
}

TEST_CASE("images that are not 28x28 and labels outside 0..9 are refused")
{
	TempDir dir;
	test::write_fashion_files(dir.path(), "train", 2);
	write_labels(dir.file("train-labels-idx1-ubyte.gz"), {3, 10});
	CHECK(load_error(dir.path(), Split::train).find("label 10 of sample 1 is outside 0..9") != std::string::npos);

	IdxContent small{.dims = {2, 27, 28}, .data = std::vector<uint8_t>(2 * 27 * 28, 1)};
	test::write_file(dir.file("train-images-idx3-ubyte.gz"), test::idx_bytes(small));
	CHECK(load_error(dir.path(), Split::train).find("holds 27x28 images") != std::string::npos);
}

TEST_CASE("a missing label file is named")
{
	TempDir dir;
	test::write_fashion_files(dir.path(), "train", 2);
	std::filesystem::remove(dir.file("train-labels-idx1-ubyte.gz"));
	CHECK(load_error(dir.path(), Split::train).find("train-labels-idx1-ubyte.gz: No such file") != std::string::npos);
}

TEST_CASE("the agreed loader turns one rank's bad file into an error on every rank")
{
	TempDir dir;
	test::write_fashion_files(dir.path(), "t10k", 3);
	const int last = world().size() - 1;
	if (world().rank() == last)
		std::filesystem::remove(dir.file("t10k-images-idx3-ubyte.gz"));
	if (world().size() == 1) {
		CHECK_THROWS_AS(load_fashion_mnist_agreed(world().comm(), dir.path(), Split::test), AgreedError);
		return;
	}
	std::string message;
	try {
		load_fashion_mnist_agreed(world().comm(), dir.path(), Split::test);
	} catch (const AgreedError& e) {
		message = e.what();
	}
	CHECK(message.starts_with("rank " + std::to_string(last) + ": cannot open IDX file"));
}

TEST_CASE("the real Fashion-MNIST files, when installed, hold 60000 + 10000 balanced samples")
{
	const std::string dir = default_fashion_mnist_dir();
	if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
		MESSAGE("Fashion-MNIST is not installed at " << dir << "; nothing to check");
		return;
	}
	const Dataset train = load_fashion_mnist(dir, Split::train);
	const Dataset test = load_fashion_mnist(dir, Split::test);
	CHECK(train.count == 60000);
	CHECK(test.count == 10000);
	std::array<int64_t, 10> per_class{};
	for (int32_t label : train.labels) {
		REQUIRE(label >= 0);
		REQUIRE(label <= 9);
		++per_class[static_cast<size_t>(label)];
	}
	for (int64_t n : per_class)
		CHECK(n == 6000);
	float lo = 1.0f, hi = 0.0f;
	for (float x : test.images) {
		lo = std::min(lo, x);
		hi = std::max(hi, x);
	}
	CHECK(lo == 0.0f);
	CHECK(hi == 1.0f);
}
