// Reading IDX files, the big-endian array format of the MNIST family, optionally gzip-compressed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tower {

// An array of unsigned bytes with its dimensions, outermost first.
struct IdxArray {
	std::vector<int64_t> dims;
	std::vector<uint8_t> data; // row-major, product(dims) bytes
};

// Reads `path` (gzip or plain) and checks the header: magic 0x00 0x00 0x08 (unsigned bytes)
// followed by `expected_rank`, positive dimensions, and exactly product(dims) bytes of data
// after them. Throws tower::Error naming the file and what was wrong.
IdxArray read_idx(const std::string& path, int expected_rank);

} // namespace tower
