// Files that appear whole or not at all: temporary file, fsync, rename, directory fsync.
#include "runtime/checkpoint/durable_file.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include "base/error.h"

namespace tower {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path)
{
	throw Error(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

int write_delay_ms()
{
	const char* v = std::getenv("TOWER_TEST_CHECKPOINT_WRITE_DELAY_MS");
	return v ? std::atoi(v) : 0;
}

// Closes the descriptor when the scope ends, whatever happens.
struct Fd {
	int fd = -1;
	~Fd()
	{
		if (fd >= 0)
			::close(fd);
	}
};

} // namespace

void sync_directory(const std::string& path)
{
	Fd dir{::open(path.c_str(), O_RDONLY | O_DIRECTORY)};
	if (dir.fd < 0)
		fail("cannot open directory", path);
	if (::fsync(dir.fd) != 0)
		fail("cannot fsync directory", path);
}

void write_file_durably(const std::string& path, std::span<const std::byte> bytes)
{
	const std::string temporary = path + ".tmp";
	{
		Fd file{::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
		if (file.fd < 0)
			fail("cannot create", temporary);
		const int delay = write_delay_ms();
		constexpr size_t piece = size_t{1} << 20;
		for (size_t at = 0; at < bytes.size();) {
			const ssize_t n = ::write(file.fd, bytes.data() + at, std::min(piece, bytes.size() - at));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				fail("cannot write", temporary);
			at += static_cast<size_t>(n);
			if (delay > 0)
				std::this_thread::sleep_for(std::chrono::milliseconds(delay));
		}
		if (::fsync(file.fd) != 0)
			fail("cannot fsync", temporary);
	}
	if (::rename(temporary.c_str(), path.c_str()) != 0)
		fail("cannot rename into place", path);
	const auto parent = std::filesystem::path(path).parent_path();
	sync_directory(parent.empty() ? std::string(".") : parent.string());
}

} // namespace tower
