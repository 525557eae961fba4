// Rank 0's view of a training run: a live line on a terminal, plain periodic lines otherwise.
#include "runtime/observe/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace tower {

namespace {

std::string clock_text(double seconds)
{
	const auto s = static_cast<int64_t>(seconds + 0.5);
	return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}

} // namespace

bool stdout_is_terminal()
{
	if (isatty(STDOUT_FILENO) != 1)
		return false;
	// mpirun hands its ranks a pseudo-terminal even when its own output goes to a pipe or a file,
	// so under a launcher the terminal that matters is the launcher's.
	if (!std::getenv("OMPI_COMM_WORLD_SIZE"))
		return true;
	const int fd = open(fmt::format("/proc/{}/fd/1", getppid()).c_str(), O_WRONLY | O_NOCTTY);
	if (fd < 0)
		return false;
	const bool terminal = isatty(fd) == 1;
	close(fd);
	return terminal;
}

Progress::Progress(bool enabled, bool live) : enabled_(enabled), live_(live) {}

void Progress::update(const ProgressState& s)
{
	if (!enabled_)
		return;
	const std::lock_guard lock(mutex_);
	const std::string text = fmt::format("epoch {}/{}  step {}/{}  loss {:.4f}  {:.0f} samples/s  ETA {}{}{}",
					     s.epoch, s.epochs, s.step, s.steps, s.loss, s.samples_per_s,
					     clock_text(s.eta_s), s.extra.empty() ? "" : "  ", s.extra);
	if (live_) {
		fmt::print("\r\033[K{}", text);
		line_open_ = true;
	} else {
		fmt::print("{}\n", text);
	}
	std::fflush(stdout);
}

void Progress::say(const std::string& line)
{
	if (!enabled_)
		return;
	const std::lock_guard lock(mutex_);
	if (line_open_)
		fmt::print("\n");
	line_open_ = false;
	fmt::print("{}\n", line);
	std::fflush(stdout);
}

} // namespace tower
