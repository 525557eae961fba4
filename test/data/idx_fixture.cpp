// Test helpers: a private temporary directory and small IDX files written into it with zlib.
#include "test/data/idx_fixture.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include <zlib.h>

namespace tower::test {

TempDir::TempDir()
{
	std::string pattern = (std::filesystem::temp_directory_path() / "tower-test-XXXXXX").string();
	if (!mkdtemp(pattern.data()))
		throw std::runtime_error("mkdtemp failed for " + pattern);
	path_ = pattern;
}

TempDir::~TempDir()
{
	std::error_code ignored;
	std::filesystem::remove_all(path_, ignored);
}

std::vector<uint8_t> idx_bytes(const IdxContent& content)
{
	const int rank = content.rank < 0 ? static_cast<int>(content.dims.size()) : content.rank;
	std::vector<uint8_t> out = {0, 0, content.type, static_cast<uint8_t>(rank)};
	for (uint32_t d : content.dims)
		for (int shift : {24, 16, 8, 0})
			out.push_back(static_cast<uint8_t>(d >> shift));
	out.insert(out.end(), content.data.begin(), content.data.end());
	return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip)
{
	if (!gzip) {
		FILE* f = std::fopen(path.c_str(), "wb");
		if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
			throw std::runtime_error("cannot write " + path);
		std::fclose(f);
		return;
	}
	gzFile f = gzopen(path.c_str(), "wb");
	if (!f)
		throw std::runtime_error("cannot create " + path);
	const bool ok = bytes.empty() || gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) > 0;
	if (gzclose(f) != Z_OK || !ok)
		throw std::runtime_error("cannot write " + path);
}

void write_fashion_files(const std::string& dir, const std::string& split, uint32_t count)
{
	IdxContent images{.dims = {count, 28, 28}, .data = {}};
	for (uint32_t i = 0; i < count; ++i)
		for (uint32_t j = 0; j < 28 * 28; ++j)
			images.data.push_back(static_cast<uint8_t>((i * 7 + j) % 256));
	IdxContent labels{.dims = {count}, .data = {}};
	for (uint32_t i = 0; i < count; ++i)
		labels.data.push_back(static_cast<uint8_t>(i % 10));
	write_file(dir + "/" + split + "-images-idx3-ubyte.gz", idx_bytes(images));
	write_file(dir + "/" + split + "-labels-idx1-ubyte.gz", idx_bytes(labels));
}

} // namespace tower::test
