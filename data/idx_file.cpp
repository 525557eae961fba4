// Reading IDX files, the big-endian array format of the MNIST family, optionally gzip-compressed.
#include "data/idx_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include <zlib.h>

#include "base/error.h"

namespace tower {

namespace {

constexpr uint8_t idx_ubyte_type = 0x08;
constexpr size_t header_fixed_bytes = 4;
// Far above any dataset we read; it keeps a corrupt dimension from asking for terabytes.
constexpr int64_t max_data_bytes = int64_t{1} << 34;

using GzFile = std::unique_ptr<gzFile_s, decltype(&gzclose)>;

GzFile open_gz(const std::string& path)
{
	errno = 0;
	gzFile f = gzopen(path.c_str(), "rb");
	if (!f)
		throw Error(fmt::format("cannot open IDX file {}: {}", path,
					errno ? std::strerror(errno) : "zlib could not allocate its state"));
	return GzFile(f, &gzclose);
}

// Reads up to `bytes` into `out`, fewer only at the end of the file.
size_t read_some(gzFile f, const std::string& path, uint8_t* out, size_t bytes)
{
	size_t done = 0;
	while (done < bytes) {
		const unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30));
		const int n = gzread(f, out + done, chunk);
		if (n < 0) {
			int code = 0;
			throw Error(fmt::format("IDX file {} is not readable gzip: {}", path, gzerror(f, &code)));
		}
		if (n == 0) {
			// zlib reports a gzip stream that stops early (inside the compressed data, or
			// before the trailer with its check) as a soft error at the end, not a failed read.
			int code = Z_OK;
			const char* message = gzerror(f, &code);
			if (code == Z_BUF_ERROR)
				throw Error(fmt::format("IDX file {} is a truncated gzip stream ({}); fetch the file again",
							path, message));
			break;
		}
		done += static_cast<size_t>(n);
	}
	return done;
}

void read_exact(gzFile f, const std::string& path, uint8_t* out, size_t bytes, const char* what)
{
	const size_t got = read_some(f, path, out, bytes);
	if (got != bytes)
		throw Error(fmt::format("IDX file {} is truncated: it ends {} bytes into the {} ({} expected)", path,
					got, what, bytes));
}

std::vector<int64_t> read_dims(gzFile f, const std::string& path, int expected_rank)
{
	uint8_t magic[header_fixed_bytes];
	read_exact(f, path, magic, sizeof magic, "magic number");
	if (magic[0] != 0 || magic[1] != 0 || magic[2] != idx_ubyte_type)
		throw Error(fmt::format("{} is not an IDX file of unsigned bytes: magic {:02x} {:02x} {:02x} {:02x}, "
					"expected 00 00 08 {:02x}",
					path, magic[0], magic[1], magic[2], magic[3], expected_rank));
	if (magic[3] != expected_rank)
		throw Error(fmt::format("IDX file {} has {} dimensions where {} were expected", path, magic[3],
					expected_rank));
	std::vector<uint8_t> raw(static_cast<size_t>(expected_rank) * 4);
	read_exact(f, path, raw.data(), raw.size(), "dimensions");
	std::vector<int64_t> dims;
	for (size_t i = 0; i < raw.size(); i += 4) {
		const uint32_t d = (uint32_t{raw[i]} << 24) | (uint32_t{raw[i + 1]} << 16) | (uint32_t{raw[i + 2]} << 8) |
				   uint32_t{raw[i + 3]};
		dims.push_back(static_cast<int64_t>(d));
	}
	return dims;
}

int64_t data_bytes(const std::vector<int64_t>& dims, const std::string& path)
{
	int64_t total = 1;
	for (int64_t d : dims) {
		if (d <= 0)
			throw Error(fmt::format("IDX file {} has a zero dimension in [{}]", path, fmt::join(dims, ", ")));
		if (total > max_data_bytes / d)
			throw Error(fmt::format("IDX file {} claims dimensions [{}], over {} bytes; the header is corrupt",
						path, fmt::join(dims, ", "), max_data_bytes));
		total *= d;
	}
	return total;
}

// Reads up to `bytes` of data into `out`, growing it as the data arrives (1 MiB, then doubling up
// to 64 MiB a read): a corrupt header that claims gigabytes costs memory only for about twice
// the bytes the file really holds.
size_t read_data(gzFile f, const std::string& path, size_t bytes, std::vector<uint8_t>* out)
{
	size_t chunk = size_t{1} << 20;
	while (out->size() < bytes) {
		const size_t have = out->size(), want = std::min(bytes - have, chunk);
		out->resize(have + want);
		const size_t got = read_some(f, path, out->data() + have, want);
		if (got < want) {
			out->resize(have + got);
			break;
		}
		chunk = std::min(chunk * 2, size_t{64} << 20);
	}
	return out->size();
}

} // namespace

IdxArray read_idx(const std::string& path, int expected_rank)
{
	GzFile f = open_gz(path);
	IdxArray array;
	array.dims = read_dims(f.get(), path, expected_rank);
	const auto bytes = static_cast<size_t>(data_bytes(array.dims, path));
	const size_t got = read_data(f.get(), path, bytes, &array.data);
	if (got != bytes)
		throw Error(fmt::format("IDX file {} is truncated: dimensions [{}] need {} bytes of data but only {} follow",
					path, fmt::join(array.dims, ", "), bytes, got));
	uint8_t extra = 0;
	if (read_some(f.get(), path, &extra, 1) != 0)
		throw Error(fmt::format("IDX file {} has data past the {} bytes its dimensions [{}] describe", path, bytes,
					fmt::join(array.dims, ", ")));
	return array;
}

} // namespace tower
