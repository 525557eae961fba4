// libFuzzer target: checkpoint files from arbitrary bytes must load consistently or throw tower::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "base/error.h"
#include "runtime/checkpoint/checkpoint_file.h"
#include "runtime/checkpoint/variable_pieces.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	const auto* bytes = reinterpret_cast<const std::byte*>(data);
	// The header alone (what resume reads first to list a directory), then the whole file with
	// every CRC, as resume reads it before trusting a byte.
	try {
		const tower::CheckpointHeader header = tower::parse_checkpoint_header(std::span(bytes, size));
		for (const tower::CheckpointEntry& e : header.entries)
			if (e.offset > header.file_bytes || e.bytes > header.file_bytes - e.offset)
				std::abort(); // an accepted header must keep its tensors inside the file it describes
	} catch (const tower::Error&) {
	}
	try {
		const tower::CheckpointFile file(std::vector<std::byte>(bytes, bytes + size));
		for (const tower::CheckpointEntry& e : file.header().entries)
			if (file.tensor(e).bytes() != e.bytes)
				std::abort();
		// The index of pieces a resume assembles variables from: an accepted piece lies inside
		// its variable.
		if (file.metadata().contains("pieces") && file.metadata()["pieces"].is_array())
			for (const auto& j : file.metadata()["pieces"]) {
				const tower::VariablePiece p = tower::VariablePiece::from_json(j);
				if (p.offset < 0 || p.count < 0 || p.offset + p.count > tower::shape_numel(p.whole))
					std::abort();
			}
	} catch (const tower::Error&) {
	} catch (const nlohmann::json::exception&) {
	}
	return 0;
}
