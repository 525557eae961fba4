// The checkpoint file format: CRC32C, a round trip, and each kind of damage detected.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "base/crc32c.h"
#include "runtime/checkpoint/checkpoint_file.h"

using namespace tower;

namespace {

std::vector<NamedTensor> sample_tensors()
{
	std::vector<float> weights(1000);
	for (size_t i = 0; i < weights.size(); ++i)
		weights[i] = 0.25f * static_cast<float>(i) - 7.0f;
	Tensor step = Tensor::zeros({1}, DType::i64, Device{});
	*step.data_as<int64_t>() = 1234567890123;
	return {{"fc.weight", Tensor::from_host(weights, {10, 100}, Device{})},
		{"fc.bias", Tensor::from_host({1.5f, -2.5f, 3.0f}, {3}, Device{})},
		{"optimizer/step", step},
		{"empty", Tensor::zeros({0, 4}, DType::f32, Device{})}};
}

std::vector<std::byte> sample_file()
{
	return serialize_checkpoint({{"kind", "variables"}, {"step", 200}}, sample_tensors());
}

// The message of the CheckpointError that reading `bytes` throws, or "" when it reads.
std::string problem_reading(std::vector<std::byte> bytes)
{
	try {
		CheckpointFile file(std::move(bytes));
	} catch (const CheckpointError& e) {
		return e.what();
	}
	return "";
}

} // namespace

TEST_CASE("crc32c: the standard check value, in pieces, and both implementations agree")
{
	const std::string nine = "123456789";
	CHECK(crc32c(nine.data(), nine.size()) == 0xE3069283u);
	CHECK(crc32c_portable(nine.data(), nine.size()) == 0xE3069283u);
	CHECK(crc32c(nine.data() + 4, 5, crc32c(nine.data(), 4)) == 0xE3069283u);
	std::vector<unsigned char> data(1037);
	for (size_t i = 0; i < data.size(); ++i)
		data[i] = static_cast<unsigned char>(i * 31 + 7);
	for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1037}})
		CHECK(crc32c(data.data(), n) == crc32c_portable(data.data(), n));
}

TEST_CASE("checkpoint file: a round trip keeps names, dtypes, shapes, values and metadata")
{
	const auto tensors = sample_tensors();
	const CheckpointFile file(sample_file());
	CHECK(file.metadata().at("step") == 200);
	REQUIRE(file.header().entries.size() == tensors.size());
	for (const auto& t : tensors) {
		CAPTURE(t.name);
		const CheckpointEntry* e = file.find(t.name);
		REQUIRE(e != nullptr);
		CHECK(e->dtype == t.tensor.dtype());
		CHECK(e->shape == t.tensor.shape());
		CHECK(e->offset % 64 == 0);
		// memcmp must not see the null data of an empty tensor.
		CHECK((t.tensor.bytes() == 0 || std::memcmp(file.tensor(*e).data(), t.tensor.data(), t.tensor.bytes()) == 0));
	}
	CHECK(file.find("absent") == nullptr);
	// The header parses from its own bytes alone (what a fuzz target feeds it).
	const auto bytes = sample_file();
	const auto header = parse_checkpoint_header(std::span(bytes).first(static_cast<size_t>(file.header().header_bytes)));
	CHECK(header.entries.size() == tensors.size());
}

TEST_CASE("checkpoint file: bad magic is rejected")
{
	auto bytes = sample_file();
	bytes[0] = std::byte{'X'};
	CHECK(problem_reading(bytes).find("bad magic") != std::string::npos);
}

TEST_CASE("checkpoint file: another version is rejected")
{
	auto bytes = sample_file();
	bytes[8] = std::byte{3};
	CHECK(problem_reading(bytes).find("format version 3") != std::string::npos);
	CHECK(problem_reading(bytes).find("newer tower") != std::string::npos);
	bytes[8] = std::byte{1}; // before each tensor's place in its variable was recorded
	CHECK(problem_reading(bytes).find("format version 1; this tower reads version 2") != std::string::npos);
	CHECK(problem_reading(bytes).find("start it over") != std::string::npos);
}

TEST_CASE("checkpoint file: a changed header byte fails the header CRC")
{
	auto bytes = sample_file();
	bytes[70] ^= std::byte{1}; // inside the metadata text
	CHECK(problem_reading(bytes) == "header CRC mismatch");
}

TEST_CASE("checkpoint file: a changed tensor byte names the tensor")
{
	const CheckpointFile good(sample_file());
	auto bytes = sample_file();
	bytes[good.find("fc.bias")->offset + 5] ^= std::byte{0x10};
	CHECK(problem_reading(bytes) == "CRC mismatch in tensor 'fc.bias'");
}

TEST_CASE("checkpoint file: a changed padding byte fails the whole-file CRC")
{
	const CheckpointFile good(sample_file());
	const CheckpointEntry& bias = *good.find("fc.bias");
	auto bytes = sample_file();
	bytes[bias.offset + bias.bytes + 1] ^= std::byte{1}; // between fc.bias and the next tensor
	CHECK(problem_reading(bytes) == "CRC mismatch over the whole file");
}

TEST_CASE("checkpoint file: truncation anywhere is rejected")
{
	const auto whole = sample_file();
	for (size_t keep : {size_t{0}, size_t{10}, size_t{100}, whole.size() / 2, whole.size() - 1}) {
		CAPTURE(keep);
		const std::vector<std::byte> cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(keep));
		CHECK_FALSE(problem_reading(cut).empty());
	}
	CHECK(problem_reading(std::vector<std::byte>(whole.begin(), whole.end() - 1)).find("truncated") != std::string::npos);
}

TEST_CASE("checkpoint file: a directory entry pointing outside the file is rejected, even with a valid header CRC")
{
	auto bytes = sample_file();
	const auto header_bytes = static_cast<size_t>(CheckpointFile(sample_file()).header().header_bytes);
	// fc.weight's entry: its name, then dtype (4), rank (4) and two dimensions (8 each), then the offset.
	const std::string name = "fc.weight";
	const auto* begin = reinterpret_cast<const char*>(bytes.data());
	const auto found = std::string_view(begin, header_bytes).find(name);
	REQUIRE(found != std::string_view::npos);
	const uint64_t far = uint64_t{1} << 40;
	std::memcpy(bytes.data() + found + name.size() + 4 + 4 + 2 * 8, &far, sizeof far);
	CHECK(problem_reading(bytes) == "header CRC mismatch");
	// As docs/checkpoints.md says: the header's CRC32C with its own field as zero, at byte 40.
	std::memset(bytes.data() + 40, 0, 4);
	const uint32_t crc = crc32c(bytes.data(), header_bytes);
	std::memcpy(bytes.data() + 40, &crc, 4);
	CHECK(problem_reading(bytes).find("'fc.weight' lies at bytes [1099511627776") != std::string::npos);
}
