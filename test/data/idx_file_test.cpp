// IDX reader tests: round trips through gzip and plain files, and each malformed-file error.
#include <string>

#include <doctest/doctest.h>

#include "models/data/idx_file.h"
#include "runtime/base/error.h"
#include "test/data/idx_fixture.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::IdxContent;
using tower::test::TempDir;

namespace {

IdxContent cube()
{
	IdxContent c{.dims = {3, 2, 4}, .data = {}};
	for (int i = 0; i < 24; ++i)
		c.data.push_back(static_cast<uint8_t>(i * 11));
	return c;
}

// Writes `content` (cut to `keep` bytes when given) and returns the error reading it as rank 3.
std::string error_reading(const TempDir& dir, const std::vector<uint8_t>& bytes, int rank = 3)
{
	const std::string path = dir.file("bad.gz");
	test::write_file(path, bytes);
	try {
		read_idx(path, rank);
	} catch (const Error& e) {
		const std::string message = e.what();
		CHECK(message.find(path) != std::string::npos);
		return message;
	}
	FAIL("reading a malformed file raised no error");
	return "";
}

std::vector<uint8_t> cut(std::vector<uint8_t> bytes, size_t keep)
{
	bytes.resize(keep);
	return bytes;
}

} // namespace

TEST_CASE("a gzip IDX file reads back with its dimensions and bytes")
{
	TempDir dir;
	const IdxContent c = cube();
	test::write_file(dir.file("cube.gz"), test::idx_bytes(c));
	const IdxArray a = read_idx(dir.file("cube.gz"), 3);
	CHECK(a.dims == std::vector<int64_t>{3, 2, 4});
	CHECK(a.data == c.data);
}

TEST_CASE("an uncompressed IDX file and a large one read back too")
{
	TempDir dir;
	test::write_file(dir.file("cube"), test::idx_bytes(cube()), false);
	CHECK(read_idx(dir.file("cube"), 3).data == cube().data);

	// Big-endian dims above 255 and data longer than one zlib buffer.
	IdxContent big{.dims = {70001}, .data = {}};
	for (uint32_t i = 0; i < 70001; ++i)
		big.data.push_back(static_cast<uint8_t>(i * 2654435761u >> 24));
	test::write_file(dir.file("big.gz"), test::idx_bytes(big));
	const IdxArray a = read_idx(dir.file("big.gz"), 1);
	CHECK(a.dims == std::vector<int64_t>{70001});
	CHECK(a.data == big.data);
}

TEST_CASE("a bad magic number is named")
{
	TempDir dir;
	auto bytes = test::idx_bytes(cube());
	bytes[0] = 0x1f;
	CHECK(error_reading(dir, bytes).find("not an IDX file of unsigned bytes") != std::string::npos);
	IdxContent floats = cube();
	floats.type = 0x0d;
	CHECK(error_reading(dir, test::idx_bytes(floats)).find("magic 00 00 0d 03") != std::string::npos);
}

TEST_CASE("a file of another rank, or with a zero dimension, is refused")
{
	TempDir dir;
	CHECK(error_reading(dir, test::idx_bytes(cube()), 1).find("has 3 dimensions where 1 were expected") !=
	      std::string::npos);
	IdxContent empty{.dims = {3, 0, 4}, .data = {}};
	CHECK(error_reading(dir, test::idx_bytes(empty)).find("zero dimension in [3, 0, 4]") != std::string::npos);
}

TEST_CASE("truncation anywhere is reported with what was cut short")
{
	TempDir dir;
	const auto bytes = test::idx_bytes(cube()); // 4 + 12 header bytes, 24 data bytes
	CHECK(error_reading(dir, cut(bytes, 2)).find("truncated: it ends 2 bytes into the magic number") !=
	      std::string::npos);
	CHECK(error_reading(dir, cut(bytes, 9)).find("truncated: it ends 5 bytes into the dimensions") !=
	      std::string::npos);
	CHECK(error_reading(dir, cut(bytes, 30)).find("need 24 bytes of data but only 14 follow") != std::string::npos);
}

TEST_CASE("data beyond what the dimensions describe is an error")
{
	TempDir dir;
	auto bytes = test::idx_bytes(cube());
	bytes.push_back(7);
	CHECK(error_reading(dir, bytes).find("data past the 24 bytes") != std::string::npos);
}

TEST_CASE("a missing file is named with the system's reason")
{
	TempDir dir;
	const std::string path = dir.file("absent.gz");
	CHECK_THROWS_WITH_AS(read_idx(path, 1), ("cannot open IDX file " + path + ": No such file or directory").c_str(),
			     Error);
}
