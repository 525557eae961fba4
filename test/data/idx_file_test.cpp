// IDX reader tests: round trips through gzip and plain files, and each malformed-file error.
#include <fstream>
#include <iterator>
#include <string>

#include <doctest/doctest.h>

#include "data/idx_file.h"
#include "base/tensor/memory_host.h"
#include "base/error.h"
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

// Writes `bytes` (gzip-compressed unless `gzip` is false, for bytes that are a gzip file
// already) and returns the error reading them as an array of `rank` dimensions.
std::string error_reading(const TempDir& dir, const std::vector<uint8_t>& bytes, int rank = 3, bool gzip = true)
{
	const std::string path = dir.file("bad.gz");
	test::write_file(path, bytes, gzip);
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

// The cube as a gzip file's bytes, for corrupting the compressed stream itself.
std::vector<uint8_t> gzipped_cube(const TempDir& dir)
{
	const std::string path = dir.file("cube.gz");
	test::write_file(path, test::idx_bytes(cube()));
	std::ifstream in(path, std::ios::binary);
	return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool contains(const std::string& text, const std::string& part)
{
	return text.find(part) != std::string::npos;
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

TEST_CASE("dimensions that disagree with the data, are zero, or are absurdly large are refused")
{
	TempDir dir;
	IdxContent longer = cube();
	longer.dims = {3, 2, 5};
	CHECK(contains(error_reading(dir, test::idx_bytes(longer)),
		       "dimensions [3, 2, 5] need 30 bytes of data but only 24 follow"));
	IdxContent shorter = cube();
	shorter.dims = {3, 2, 3};
	CHECK(contains(error_reading(dir, test::idx_bytes(shorter)),
		       "has data past the 18 bytes its dimensions [3, 2, 3] describe"));
	IdxContent zero_first = cube();
	zero_first.dims = {0, 2, 4};
	CHECK(contains(error_reading(dir, test::idx_bytes(zero_first)), "zero dimension in [0, 2, 4]"));
	IdxContent zero_last = cube();
	zero_last.dims = {3, 2, 0};
	CHECK(contains(error_reading(dir, test::idx_bytes(zero_last)), "zero dimension in [3, 2, 0]"));
	// A dimension with the top bit set (-2 as a signed 32-bit number) reads as 2^32 - 2; the
	// product is refused before any memory is asked for.
	IdxContent negative = cube();
	negative.dims = {0xfffffffe, 2, 4};
	CHECK(contains(error_reading(dir, test::idx_bytes(negative)),
		       "claims dimensions [4294967294, 2, 4], over 17179869184 bytes; the header is corrupt"));
	IdxContent huge = cube();
	huge.dims = {65536, 65536, 65536};
	CHECK(contains(error_reading(dir, test::idx_bytes(huge)),
		       "claims dimensions [65536, 65536, 65536], over 17179869184 bytes"));
}

// The reader once sized its buffer from the header alone, so 24 bytes of data behind a header
// claiming 1 GiB allocated and zeroed 1 GiB first (and libFuzzer's memory limit stopped on it).
TEST_CASE("a header claiming far more data than the file holds costs no more memory than the file")
{
	TempDir dir;
	IdxContent claims_a_gigabyte = cube();
	claims_a_gigabyte.dims = {1024, 1024, 1024};
	const size_t peak_before = host_peak_rss_bytes();
	CHECK(contains(error_reading(dir, test::idx_bytes(claims_a_gigabyte)),
		       "need 1073741824 bytes of data but only 24 follow"));
	// Well under the gigabyte the header asked for, with room for the reader's 64 MiB chunk.
	CHECK(host_peak_rss_bytes() < peak_before + (size_t{256} << 20));
}

TEST_CASE("a corrupt or truncated gzip stream is reported as such")
{
	TempDir dir;
	const std::vector<uint8_t> gz = gzipped_cube(dir);
	REQUIRE(gz.size() > 18); // a 10-byte header, the compressed data, an 8-byte trailer
	// A valid gzip header followed by bytes that are no deflate stream.
	std::vector<uint8_t> garbage = cut(gz, 10);
	garbage.insert(garbage.end(), 40, 0xff);
	CHECK(contains(error_reading(dir, garbage, 3, false), "is not readable gzip"));
	// A flipped bit in the trailer's CRC-32.
	std::vector<uint8_t> bad_check = gz;
	bad_check[gz.size() - 8] ^= 1;
	CHECK(contains(error_reading(dir, bad_check, 3, false), "is not readable gzip"));
	CHECK(contains(error_reading(dir, bad_check, 3, false), "incorrect data check"));
	// Cut inside the compressed data, and cut before the trailer: all data there, but unchecked.
	for (size_t keep : {gz.size() / 2, gz.size() - 8, gz.size() - 1}) {
		CAPTURE(keep);
		CHECK(contains(error_reading(dir, cut(gz, keep), 3, false), "is a truncated gzip stream"));
	}
}
