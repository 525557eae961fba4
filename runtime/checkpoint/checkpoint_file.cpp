// One checkpoint file: named tensors and a JSON metadata object, with CRC32C sums (docs/checkpoints.md).
#include "runtime/checkpoint/checkpoint_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include "base/crc32c.h"
#include "base/tensor/memory.h"

namespace tower {

namespace {

static_assert(std::endian::native == std::endian::little, "checkpoint files are little-endian");

constexpr char magic[8] = {'T', 'O', 'W', 'R', 'C', 'K', 'P', 'T'};
constexpr char end_magic[8] = {'T', 'O', 'W', 'R', 'E', 'N', 'D', '1'};
constexpr size_t fixed_bytes = 64;
constexpr size_t trailer_bytes = 16;
constexpr size_t crc_field = 40; // where the header's own CRC sits in the fixed header
constexpr uint64_t alignment = 64;
// Bounds that keep a corrupt header from asking for absurd allocations.
constexpr uint64_t max_header_bytes = uint64_t{64} << 20;
constexpr uint32_t max_rank = 16;

// Stable codes on disk, independent of the DType enum's order.
constexpr std::pair<DType, uint32_t> dtype_codes[] = {{DType::f32, 1}, {DType::f64, 2}, {DType::f16, 3},
						      {DType::bf16, 4}, {DType::i32, 5}, {DType::i64, 6}};

uint32_t dtype_code(DType d)
{
	for (const auto& [dtype, code] : dtype_codes)
		if (dtype == d)
			return code;
	throw Error(fmt::format("dtype {} has no checkpoint code", dtype_name(d)));
}

uint64_t round_up(uint64_t n)
{
	return (n + alignment - 1) / alignment * alignment;
}

// Appends little-endian values to a byte buffer.
class Writer {
public:
	explicit Writer(std::vector<std::byte>& out) : out_(out) {}
	template <typename T> void put(T value)
	{
		const size_t at = out_.size();
		out_.resize(at + sizeof(T));
		std::memcpy(out_.data() + at, &value, sizeof(T));
	}
	void put_bytes(const void* data, size_t n)
	{
		const size_t at = out_.size();
		out_.resize(at + n);
		if (n > 0)
			std::memcpy(out_.data() + at, data, n);
	}

private:
	std::vector<std::byte>& out_;
};

// Reads little-endian values from a byte range, throwing when it runs out.
class Reader {
public:
	Reader(std::span<const std::byte> bytes, size_t at, size_t end) : bytes_(bytes), at_(at), end_(end) {}
	template <typename T> T get(const char* what)
	{
		need(sizeof(T), what);
		T value;
		std::memcpy(&value, bytes_.data() + at_, sizeof(T));
		at_ += sizeof(T);
		return value;
	}
	std::string get_string(size_t n, const char* what)
	{
		need(n, what);
		std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), n);
		at_ += n;
		return s;
	}
	size_t at() const { return at_; }

private:
	void need(size_t n, const char* what) const
	{
		if (n > end_ - at_)
			throw CheckpointError(fmt::format("the header ends inside {} (at byte {})", what, at_));
	}
	std::span<const std::byte> bytes_;
	size_t at_, end_;
};

uint32_t header_crc(std::span<const std::byte> header)
{
	// The CRC field itself counts as zero.
	const uint32_t zero = 0;
	uint32_t crc = crc32c(header.data(), crc_field);
	crc = crc32c(&zero, sizeof zero, crc);
	return crc32c(header.data() + crc_field + 4, header.size() - crc_field - 4, crc);
}

CheckpointEntry parse_entry(Reader& r, uint64_t data_start, uint64_t data_end)
{
	CheckpointEntry e;
	const auto name_bytes = r.get<uint32_t>("a tensor name's length");
	if (name_bytes == 0 || name_bytes > 4096)
		throw CheckpointError(fmt::format("a tensor name of {} bytes (1 to 4096 allowed)", name_bytes));
	e.name = r.get_string(name_bytes, "a tensor name");
	const auto code = r.get<uint32_t>("a dtype");
	const auto* found = std::find_if(std::begin(dtype_codes), std::end(dtype_codes),
					 [&](const auto& d) { return d.second == code; });
	if (found == std::end(dtype_codes))
		throw CheckpointError(fmt::format("tensor '{}' has unknown dtype code {}", e.name, code));
	e.dtype = found->first;
	const auto rank = r.get<uint32_t>("a tensor's rank");
	if (rank > max_rank)
		throw CheckpointError(fmt::format("tensor '{}' has {} dimensions (at most {})", e.name, rank, max_rank));
	uint64_t numel = 1;
	for (uint32_t i = 0; i < rank; ++i) {
		const auto d = r.get<int64_t>("a tensor's shape");
		if (d < 0 || (d > 0 && numel > std::numeric_limits<uint64_t>::max() / 64 / static_cast<uint64_t>(d)))
			throw CheckpointError(fmt::format("tensor '{}' has a bad dimension {}", e.name, d));
		numel *= static_cast<uint64_t>(d);
		e.shape.push_back(d);
	}
	e.offset = r.get<uint64_t>("a tensor's offset");
	e.bytes = r.get<uint64_t>("a tensor's size");
	e.crc = r.get<uint32_t>("a tensor's CRC");
	if (e.bytes != numel * dtype_size(e.dtype))
		throw CheckpointError(fmt::format("tensor '{}' of shape {} {} claims {} bytes", e.name, shape_text(e.shape),
						  dtype_name(e.dtype), e.bytes));
	if (e.offset % alignment != 0 || e.offset < data_start || e.offset > data_end || e.bytes > data_end - e.offset)
		throw CheckpointError(fmt::format("tensor '{}' lies at bytes [{}, +{}), outside the data section [{}, {})",
						  e.name, e.offset, e.bytes, data_start, data_end));
	return e;
}

void check_no_overlap(std::vector<CheckpointEntry> entries)
{
	std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
	for (size_t i = 1; i < entries.size(); ++i)
		if (entries[i].offset < entries[i - 1].offset + entries[i - 1].bytes)
			throw CheckpointError(fmt::format("tensors '{}' and '{}' overlap", entries[i - 1].name, entries[i].name));
}

} // namespace

CheckpointHeader parse_checkpoint_header(std::span<const std::byte> bytes)
{
	if (bytes.size() < fixed_bytes)
		throw CheckpointError(fmt::format("{} bytes, shorter than the {}-byte fixed header", bytes.size(), fixed_bytes));
	if (std::memcmp(bytes.data(), magic, sizeof magic) != 0)
		throw CheckpointError("bad magic: not a tower checkpoint file");
	Reader fixed(bytes, sizeof magic, fixed_bytes);
	CheckpointHeader h;
	h.version = fixed.get<uint32_t>("the version");
	if (h.version != checkpoint_version)
		throw CheckpointError(fmt::format(
			"format version {}; this tower reads version {}{}", h.version, checkpoint_version,
			h.version < checkpoint_version
				? " (version 1 files have no index of their tensors' places in the whole variables: finish "
				  "that run with the tower that wrote it, or start it over)"
				: " (written by a newer tower)"));
	const auto count = fixed.get<uint32_t>("the tensor count");
	h.header_bytes = fixed.get<uint64_t>("the header size");
	const auto metadata_bytes = fixed.get<uint64_t>("the metadata size");
	h.file_bytes = fixed.get<uint64_t>("the file size");
	const auto stored_crc = fixed.get<uint32_t>("the header CRC");
	if (h.header_bytes < fixed_bytes || h.header_bytes > max_header_bytes)
		throw CheckpointError(fmt::format("header size {} outside [{}, {}]", h.header_bytes, fixed_bytes,
						  max_header_bytes));
	if (h.header_bytes > bytes.size())
		throw CheckpointError(fmt::format("truncated header: {} bytes of {}", bytes.size(), h.header_bytes));
	const uint64_t data_start = round_up(h.header_bytes);
	if (h.file_bytes < data_start + trailer_bytes)
		throw CheckpointError(fmt::format("file size {} too small for a header of {} bytes", h.file_bytes,
						  h.header_bytes));
	const auto header = bytes.first(static_cast<size_t>(h.header_bytes));
	if (header_crc(header) != stored_crc)
		throw CheckpointError("header CRC mismatch");
	if (metadata_bytes > h.header_bytes - fixed_bytes)
		throw CheckpointError(fmt::format("metadata of {} bytes does not fit the header", metadata_bytes));
	Reader r(header, fixed_bytes, header.size());
	const std::string text = r.get_string(static_cast<size_t>(metadata_bytes), "the metadata");
	h.metadata = nlohmann::json::parse(text, nullptr, false);
	if (!h.metadata.is_object())
		throw CheckpointError("the metadata is not a JSON object");
	std::set<std::string> names;
	for (uint32_t i = 0; i < count; ++i) {
		h.entries.push_back(parse_entry(r, data_start, h.file_bytes - trailer_bytes));
		if (!names.insert(h.entries.back().name).second)
			throw CheckpointError(fmt::format("tensor '{}' appears twice", h.entries.back().name));
	}
	if (r.at() != header.size())
		throw CheckpointError(fmt::format("the directory ends at byte {} but the header at {}", r.at(), header.size()));
	check_no_overlap(h.entries);
	return h;
}

std::vector<std::byte> serialize_checkpoint(const nlohmann::json& metadata, const std::vector<NamedTensor>& tensors)
{
	const std::string text = metadata.dump();
	uint64_t header_bytes = fixed_bytes + text.size();
	for (const auto& t : tensors)
		header_bytes += 4 + t.name.size() + 4 + 4 + 8 * t.tensor.rank() + 8 + 8 + 4;
	std::vector<CheckpointEntry> entries;
	uint64_t at = round_up(header_bytes);
	for (const auto& t : tensors) {
		entries.push_back({t.name, t.tensor.dtype(), t.tensor.shape(), at, t.tensor.bytes(), 0});
		at = round_up(at + t.tensor.bytes());
	}
	const uint64_t file_bytes = at + trailer_bytes;

	std::vector<std::byte> out;
	out.reserve(static_cast<size_t>(file_bytes));
	out.resize(static_cast<size_t>(round_up(header_bytes)));
	for (size_t i = 0; i < tensors.size(); ++i) {
		out.resize(static_cast<size_t>(entries[i].offset + entries[i].bytes));
		const Tensor& t = tensors[i].tensor;
		copy_bytes(out.data() + entries[i].offset, Device{}, t.data(), t.device(), t.bytes());
		entries[i].crc = crc32c(out.data() + entries[i].offset, t.bytes());
		out.resize(static_cast<size_t>(round_up(out.size())));
	}

	std::vector<std::byte> header;
	Writer w(header);
	w.put_bytes(magic, sizeof magic);
	w.put<uint32_t>(checkpoint_version);
	w.put<uint32_t>(static_cast<uint32_t>(tensors.size()));
	w.put<uint64_t>(header_bytes);
	w.put<uint64_t>(text.size());
	w.put<uint64_t>(file_bytes);
	w.put<uint32_t>(0); // the header CRC, filled in below
	header.resize(fixed_bytes);
	w.put_bytes(text.data(), text.size());
	for (const auto& e : entries) {
		w.put<uint32_t>(static_cast<uint32_t>(e.name.size()));
		w.put_bytes(e.name.data(), e.name.size());
		w.put<uint32_t>(dtype_code(e.dtype));
		w.put<uint32_t>(static_cast<uint32_t>(e.shape.size()));
		for (int64_t d : e.shape)
			w.put<int64_t>(d);
		w.put<uint64_t>(e.offset);
		w.put<uint64_t>(e.bytes);
		w.put<uint32_t>(e.crc);
	}
	TOWER_CHECK_EQ(header.size(), header_bytes, "checkpoint header layout");
	const uint32_t crc = header_crc(header);
	std::memcpy(header.data() + crc_field, &crc, sizeof crc);
	std::memcpy(out.data(), header.data(), header.size());

	const uint32_t whole = crc32c(out.data(), out.size());
	Writer trailer(out);
	trailer.put<uint32_t>(whole);
	trailer.put<uint32_t>(0);
	trailer.put_bytes(end_magic, sizeof end_magic);
	TOWER_CHECK_EQ(out.size(), file_bytes, "checkpoint file layout");
	return out;
}

CheckpointFile::CheckpointFile(std::vector<std::byte> bytes) : bytes_(std::move(bytes))
{
	header_ = parse_checkpoint_header(bytes_);
	if (bytes_.size() != header_.file_bytes)
		throw CheckpointError(fmt::format("truncated or extended: {} bytes where the header says {}", bytes_.size(),
						  header_.file_bytes));
	const size_t body = bytes_.size() - trailer_bytes;
	uint32_t stored = 0;
	std::memcpy(&stored, bytes_.data() + body, sizeof stored);
	if (std::memcmp(bytes_.data() + body + 8, end_magic, sizeof end_magic) != 0)
		throw CheckpointError("bad end marker: the file was cut or overwritten at its end");
	for (const auto& e : header_.entries)
		if (crc32c(bytes_.data() + e.offset, e.bytes) != e.crc)
			throw CheckpointError(fmt::format("CRC mismatch in tensor '{}'", e.name));
	if (crc32c(bytes_.data(), body) != stored)
		throw CheckpointError("CRC mismatch over the whole file");
}

const CheckpointEntry* CheckpointFile::find(const std::string& name) const
{
	for (const auto& e : header_.entries)
		if (e.name == name)
			return &e;
	return nullptr;
}

Tensor CheckpointFile::tensor(const CheckpointEntry& e) const
{
	return Tensor::view(const_cast<std::byte*>(bytes_.data() + e.offset), e.shape, e.dtype, Device{});
}

CheckpointFile read_checkpoint_file(const std::string& path)
{
	std::ifstream in(path, std::ios::binary | std::ios::ate);
	if (!in)
		throw CheckpointError(fmt::format("{}: cannot open", path));
	const auto size = static_cast<size_t>(in.tellg());
	std::vector<std::byte> bytes(size);
	in.seekg(0);
	in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
	if (!in)
		throw CheckpointError(fmt::format("{}: read failed", path));
	try {
		return CheckpointFile(std::move(bytes));
	} catch (const CheckpointError& e) {
		throw CheckpointError(fmt::format("{}: {}", path, e.what()));
	}
}

} // namespace tower
