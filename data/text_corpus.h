// Byte-level text for language models: a corpus read from files, split, and cut into windows of bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "data/sample_set.h"

namespace tower {

// Where Debian's fortunes package puts its text (its .dat files are binary indexes, left out).
std::string default_text_dir();

// The bytes of a file, or of every text file under a directory (recursively, in sorted path order,
// each followed by a newline). Files ending in .dat and links to files are left out (linked
// directories are followed). Throws tower::Error naming the
// path when it is missing or unreadable, when a file is binary (a NUL byte, or over 10% of its first
// 64 KiB outside printable ASCII, tab, newline, carriage return and UTF-8 bytes), or when no text is
// found.
std::string read_text_corpus(const std::string& path);

// The corpus cut deterministically: the first 90% of its bytes train, the last 10% validate.
enum class TextSplit { train, validation };

// Windows of context + 1 bytes of one split, context apart (neighbours share one byte; their
// targets do not overlap), as samples with one field, "tokens"
// (i32 [context + 1], each a byte 0..255): a model reads tokens[0..context) and predicts
// tokens[1..context]. The sampler shuffles and shards them as it does images.
class TextWindows final : public SampleSet {
public:
	// Throws tower::Error when the split holds fewer than `min_windows` windows, saying how many
	// bytes it would need.
	TextWindows(const std::string& corpus, TextSplit split, int64_t context, int64_t min_windows = 1,
		    std::string source = "text");

	int64_t context() const { return context_; }
	int64_t size() const override { return count_; }
	std::vector<SampleField> fields() const override;
	void copy_sample(int64_t index, const std::vector<void*>& out) const override;
	std::string describe() const override;

private:
	std::string bytes_;
	int64_t context_;
	int64_t count_;
	std::string source_;
};

// Collective over `comm`: every rank reads the corpus at `path` and cuts `split` into windows; if
// any rank fails, every rank throws tower::AgreedError listing each failing rank's problem.
TextWindows load_text_windows_agreed(MPI_Comm comm, const std::string& path, TextSplit split, int64_t context,
				     int64_t min_windows);

} // namespace tower
