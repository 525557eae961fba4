// One checkpoint file: named tensors and a JSON metadata object, with CRC32C sums (docs/checkpoints.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/tensor/named_tensor.h"

namespace tower {

// A checkpoint file that is corrupt, truncated, of another format or of an unknown version.
// The message says what is wrong; callers add the file's path.
class CheckpointError : public Error {
public:
	using Error::Error;
};

struct CheckpointEntry {
	std::string name;
	DType dtype = DType::f32;
	Shape shape;
	uint64_t offset = 0; // from the start of the file, a multiple of 64
	uint64_t bytes = 0;
	uint32_t crc = 0;    // CRC32C of the tensor's bytes
};

struct CheckpointHeader {
	uint32_t version = 0;
	uint64_t header_bytes = 0; // the fixed header, the metadata and the directory
	uint64_t file_bytes = 0;   // the whole file, trailer included
	nlohmann::json metadata;   // a JSON object
	std::vector<CheckpointEntry> entries;
};

// 2: every rank's file says where each of its tensors sits in its whole variable ("pieces" in
// its metadata), so a checkpoint loads at another world size or under another strategy.
inline constexpr uint32_t checkpoint_version = 2;

// Parses and checks a file's header from its first bytes (at least header_bytes of them; the
// whole file will do): magic, version, the header's CRC, the metadata and every directory
// entry's bounds. Throws CheckpointError saying what is wrong. Takes any bytes, for fuzzing.
CheckpointHeader parse_checkpoint_header(std::span<const std::byte> bytes);

// A whole file in memory, its header checked and every CRC verified.
class CheckpointFile {
public:
	// Throws CheckpointError for a bad header, a size other than the header says (truncation),
	// or a CRC mismatch of the whole file or of any tensor (naming it).
	explicit CheckpointFile(std::vector<std::byte> bytes);

	const CheckpointHeader& header() const { return header_; }
	const nlohmann::json& metadata() const { return header_.metadata; }
	// The entry called `name`, or nullptr.
	const CheckpointEntry* find(const std::string& name) const;
	// A host view of the entry's bytes, valid while this object lives.
	Tensor tensor(const CheckpointEntry& entry) const;

private:
	std::vector<std::byte> bytes_;
	CheckpointHeader header_;
};

// The bytes of a checkpoint file holding `tensors` (copied from any device) and `metadata`.
std::vector<std::byte> serialize_checkpoint(const nlohmann::json& metadata, const std::vector<NamedTensor>& tensors);

// Reads and verifies the file at `path`. Throws CheckpointError naming the path and the problem.
CheckpointFile read_checkpoint_file(const std::string& path);

} // namespace tower
