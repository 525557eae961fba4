// Byte-level text for language models: a corpus read from files, split, and cut into windows of bytes.
#include "data/text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "base/content_hash.h"
#include "base/error.h"
#include "base/mpi/agree.h"

namespace tower {

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path)
{
	std::ifstream in(path, std::ios::binary);
	if (!in)
		throw Error(fmt::format("text corpus: cannot read {}", path.string()));
	return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Text, as people write it: no NUL, and few bytes outside printable ASCII, whitespace and UTF-8.
void check_text(const std::string& bytes, const fs::path& path)
{
	const size_t n = std::min<size_t>(bytes.size(), 64 * 1024);
	size_t odd = 0;
	for (size_t i = 0; i < n; ++i) {
		const auto c = static_cast<unsigned char>(bytes[i]);
		if (c == 0)
			throw Error(fmt::format("text corpus: {} is binary (a NUL byte at offset {}); give text files, or "
						"a directory of them", path.string(), i));
		const bool text = c == '\t' || c == '\n' || c == '\r' || (c >= 0x20 && c < 0x7f) || c >= 0x80;
		odd += text ? 0 : 1;
	}
	if (n > 0 && odd * 10 > n)
		throw Error(fmt::format("text corpus: {} is binary ({} of its first {} bytes are control characters); "
					"give text files, or a directory of them", path.string(), odd, n));
}

int64_t split_start(int64_t size, TextSplit split)
{
	return split == TextSplit::train ? 0 : size - size / 10;
}

int64_t split_end(int64_t size, TextSplit split)
{
	return split == TextSplit::train ? size - size / 10 : size;
}

} // namespace

std::string default_text_dir()
{
	return "/usr/share/games/fortunes";
}

std::string read_text_corpus(const std::string& path)
{
	std::error_code error;
	if (!fs::exists(path, error))
		throw Error(fmt::format("text corpus: {} does not exist; give a text file or a directory of them (the "
					"Debian package fortunes puts one in {})",
					path, default_text_dir()));
	if (!fs::is_directory(path, error)) {
		std::string bytes = read_file(path);
		check_text(bytes, path);
		if (bytes.empty())
			throw Error(fmt::format("text corpus: {} is empty", path));
		return bytes;
	}
	std::vector<fs::path> files;
	for (const auto& entry : fs::recursive_directory_iterator(path, fs::directory_options::follow_directory_symlink))
		// fortunes' NAME.u8 are links to NAME: a link is read through its target only.
		if (!entry.is_symlink() && entry.is_regular_file() && entry.path().extension() != ".dat")
			files.push_back(entry.path());
	std::sort(files.begin(), files.end());
	std::string all;
	for (const fs::path& f : files) {
		const std::string bytes = read_file(f);
		check_text(bytes, f);
		all += bytes;
		all += '\n';
	}
	if (all.find_first_not_of("\n") == std::string::npos)
		throw Error(fmt::format("text corpus: {} holds no text ({} file(s), .dat files left out)", path,
					files.size()));
	return all;
}

TextWindows::TextWindows(const std::string& corpus, TextSplit split, int64_t context, int64_t min_windows,
			 std::string source)
	: context_(context), source_(std::move(source))
{
	if (context < 1)
		throw AgreedError(fmt::format("context {}: give at least 1 byte", context));
	const auto size = static_cast<int64_t>(corpus.size());
	const int64_t begin = split_start(size, split), end = split_end(size, split);
	bytes_ = corpus.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
	// Window k is bytes [k * context, k * context + context + 1): each predicts the next context.
	count_ = std::max<int64_t>(static_cast<int64_t>(bytes_.size()) - 1, 0) / context;
	if (count_ < min_windows)
		throw Error(fmt::format("text corpus {}: its {} split has {} bytes, {} window(s) of {} bytes, but {} are "
					"needed (at least {} bytes); give more text or a shorter context",
					source_, split == TextSplit::train ? "training" : "validation", bytes_.size(), count_,
					context + 1, min_windows, min_windows * context + 1));
}

std::vector<SampleField> TextWindows::fields() const
{
	return {{"tokens", DType::i32, {context_ + 1}}};
}

void TextWindows::copy_sample(int64_t index, const std::vector<void*>& out) const
{
	auto* tokens = static_cast<int32_t*>(out[0]);
	const char* from = bytes_.data() + index * context_;
	for (int64_t i = 0; i <= context_; ++i)
		tokens[i] = static_cast<unsigned char>(from[i]);
}

std::string TextWindows::describe() const
{
	return fmt::format("{} windows of {} bytes from {} bytes of {}, checksum {:016x}", count_, context_ + 1,
			   bytes_.size(), source_, content_hash(bytes_.data(), bytes_.size()));
}

TextWindows load_text_windows_agreed(MPI_Comm comm, const std::string& path, TextSplit split, int64_t context,
				     int64_t min_windows)
{
	std::string problem;
	std::optional<TextWindows> windows;
	try {
		windows.emplace(read_text_corpus(path), split, context, min_windows, path);
	} catch (const Error& e) {
		problem = e.what();
	}
	agree(comm, problem);
	return std::move(*windows);
}

} // namespace tower
