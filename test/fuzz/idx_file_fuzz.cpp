// libFuzzer target: read_idx on arbitrary bytes (plain or gzip) must return a consistent array or throw tower::Error.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "data/idx_file.h"
#include "base/error.h"

namespace {

// The input as a file: read_idx takes a path, and a memory file keeps the fuzzer off the disk.
class MemoryFile {
public:
	MemoryFile(const uint8_t* data, size_t size) : fd_(memfd_create("idx_fuzz", 0))
	{
		if (fd_ < 0 || write(fd_, data, size) != static_cast<ssize_t>(size))
			std::abort();
	}
	~MemoryFile() { close(fd_); }
	MemoryFile(const MemoryFile&) = delete;
	MemoryFile& operator=(const MemoryFile&) = delete;
	std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

private:
	int fd_;
};

void read_as(const std::string& path, int rank)
{
	try {
		const tower::IdxArray a = tower::read_idx(path, rank);
		size_t product = 1;
		for (int64_t d : a.dims)
			product *= static_cast<size_t>(d);
		if (a.dims.size() != static_cast<size_t>(rank) || a.data.size() != product)
			std::abort(); // an accepted file must match its header
	} catch (const tower::Error&) {
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	const MemoryFile file(data, size);
	// Fashion-MNIST reads labels (1 dimension) and images (3).
	read_as(file.path(), 1);
	read_as(file.path(), 3);
	return 0;
}
