// Byte-level text: a corpus from files and directories, its deterministic split, its windows as
// samples, and the errors for a missing, empty, binary or too-small corpus.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/error.h"
#include "data/sample_batcher.h"
#include "data/text_corpus.h"
#include "test/harness/mpi_main.h"

using namespace tower;
namespace fs = std::filesystem;

namespace {

// A directory of its own per test case and rank, removed at the end.
struct TempDir {
	fs::path path;
	explicit TempDir(const std::string& tag)
	    : path(fs::temp_directory_path() / fmt::format("tower-text-{}-{}-{}", tag, tower::test::world().rank(), getpid()))
	{
		fs::remove_all(path);
		fs::create_directories(path);
	}
	~TempDir() { fs::remove_all(path); }
	std::string write(const std::string& name, const std::string& bytes) const
	{
		const fs::path p = path / name;
		fs::create_directories(p.parent_path());
		std::ofstream(p, std::ios::binary) << bytes;
		return p.string();
	}
};

std::string error_of(const std::function<void()>& body)
{
	try {
		body();
	} catch (const Error& e) {
		return e.what();
	}
	return {};
}

} // namespace

TEST_CASE("a directory's text files in path order, .dat indexes left out, cut into windows of context + 1 bytes")
{
	const TempDir dir("dir");
	dir.write("b", "world");
	dir.write("a", "hello");
	dir.write("a.dat", std::string("\0\1\2", 3)); // a binary index, as fortunes ships
	dir.write("sub/c", "!");
	const std::string corpus = read_text_corpus(dir.path.string());
	CHECK(corpus == "hello\nworld\n!\n");

	const std::string text = "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghij";
	const TextWindows train(text, TextSplit::train, 4), validation(text, TextSplit::validation, 4);
	// 82 bytes: the first 74 train, the last 8 validate; windows of 5 bytes step by 4.
	CHECK(train.size() == (74 - 1) / 4);
	CHECK(validation.size() == (8 - 1) / 4);
	REQUIRE(train.fields().size() == 1);
	CHECK(train.fields()[0].name == "tokens");
	CHECK(train.fields()[0].shape == Shape{5});
	SampleBatcher batcher(train, 2, Device{});
	const std::vector<int64_t> picks = {0, 3};
	const Batch& b = batcher.assemble(picks);
	const auto* t = b.get("tokens").data_as<int32_t>();
	CHECK(std::vector<int32_t>(t, t + 5) == std::vector<int32_t>{'a', 'b', 'c', 'd', 'e'});
	CHECK(std::vector<int32_t>(t + 5, t + 10) == std::vector<int32_t>{'m', 'n', 'o', 'p', 'q'});
	// The description changes with the text: ranks with different corpora disagree.
	CHECK(train.describe() != TextWindows(text + "x", TextSplit::train, 4).describe());
}

TEST_CASE("a missing, empty, binary or too-small corpus is an error that says what to do")
{
	const TempDir dir("bad");
	CHECK(error_of([&] { read_text_corpus((dir.path / "nothing").string()); }).find("does not exist") !=
	      std::string::npos);
	CHECK(error_of([&] { read_text_corpus(dir.write("empty", "")); }).find("is empty") != std::string::npos);
	CHECK(error_of([&] { read_text_corpus(dir.write("zero", std::string("ab\0cd", 5))); })
		      .find("is binary (a NUL byte at offset 2)") != std::string::npos);
	CHECK(error_of([&] { read_text_corpus(dir.write("ctrl", std::string(100, '\x01'))); }).find("is binary") !=
	      std::string::npos);
	const TempDir only_dat("dat");
	only_dat.write("x.dat", "index");
	CHECK(error_of([&] { read_text_corpus(only_dat.path.string()); }).find("holds no text") != std::string::npos);
	CHECK(error_of([&] { TextWindows("short text", TextSplit::train, 128, 1, "tiny"); })
		      .find("at least 129 bytes") != std::string::npos);
}

TEST_CASE("the default corpus, Debian's fortunes, reads as about 2.8 MB of text")
{
	// scripts/setup-deps installs the package; without it this fails, saying so.
	const std::string corpus = read_text_corpus(default_text_dir());
	CHECK(corpus.size() > 2'000'000);
	CHECK(corpus.find("the") != std::string::npos);
	const TextWindows train(corpus, TextSplit::train, 128);
	CHECK(train.size() > 15'000);
}

TEST_CASE("every rank loads the same windows, or every rank hears which rank could not")
{
	const TempDir dir("agreed");
	const std::string path = dir.write("t", std::string(4000, 'x'));
	const TextWindows w = load_text_windows_agreed(tower::test::world().comm(), path, TextSplit::train, 63, 8);
	CHECK(w.size() == (3600 - 1) / 63);
	const std::string where = tower::test::world().rank() == 0 ? (dir.path / "missing").string() : path;
	CHECK_THROWS_AS(load_text_windows_agreed(tower::test::world().comm(), where, TextSplit::train, 63, 8), AgreedError);
}
