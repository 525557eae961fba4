// Test helpers: a private temporary directory and small IDX files written into it with zlib.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tower::test {

// A fresh directory under the system temp dir, unique to this process; removed on destruction.
class TempDir {
public:
	TempDir();
	~TempDir();
	TempDir(const TempDir&) = delete;
	TempDir& operator=(const TempDir&) = delete;

	std::string file(const std::string& name) const { return (path_ / name).string(); }
	std::string path() const { return path_.string(); }

private:
	std::filesystem::path path_;
};

// Everything an IDX file holds, so a test can corrupt any part.
struct IdxContent {
	uint8_t type = 0x08;
	int rank = -1; // -1: dims.size()
	std::vector<uint32_t> dims;
	std::vector<uint8_t> data;
};

// The file's bytes: magic, big-endian dims, data.
std::vector<uint8_t> idx_bytes(const IdxContent& content);

// Writes `bytes` to `path`, gzip-compressed or plain.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip = true);

// Fashion-MNIST-shaped files for `split` ("train" or "t10k") in `dir`: `count` 28x28 images whose
// pixel j of image i is (i * 7 + j) % 256, and label i % 10.
void write_fashion_files(const std::string& dir, const std::string& split, uint32_t count);

} // namespace tower::test
