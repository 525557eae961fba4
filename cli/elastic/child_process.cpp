// A program run as a child in a process group of its own, its output read line by line.
#include "cli/elastic/child_process.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/error.h"

namespace tower::cli {

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
			   const std::vector<std::pair<std::string, std::string>>& env, bool capture)
{
	int fds[2] = {-1, -1};
	if (capture && ::pipe2(fds, O_CLOEXEC) != 0)
		throw Error(fmt::format("cannot make a pipe: {}", std::strerror(errno)));
	// Everything the child needs is built before fork: only async-signal-safe calls after it.
	std::vector<char*> args;
	for (const std::string& a : argv)
		args.push_back(const_cast<char*>(a.c_str()));
	args.push_back(nullptr);
	// This process's environment with `env` in place of the same names (setenv would change it
	// for every later child, and is not safe beside other threads).
	std::vector<std::string> environment;
	for (char** e = environ; *e != nullptr; ++e) {
		const std::string entry(*e);
		const std::string name = entry.substr(0, entry.find('='));
		if (std::none_of(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; }))
			environment.push_back(entry);
	}
	for (const auto& [name, value] : env)
		environment.push_back(name + "=" + value);
	std::vector<char*> envp;
	for (const std::string& e : environment)
		envp.push_back(const_cast<char*>(e.c_str()));
	envp.push_back(nullptr);
	const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
	pid_ = ::fork();
	if (pid_ < 0)
		throw Error(fmt::format("cannot start {}: {}", argv.at(0), std::strerror(errno)));
	if (pid_ == 0) {
		::setpgid(0, 0);
		const int out = capture ? fds[1] : devnull;
		::dup2(out, STDOUT_FILENO);
		::dup2(out, STDERR_FILENO);
		::execvpe(args[0], args.data(), envp.data());
		const char msg[] = "tower: cannot run the launcher's child program\n";
		(void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
		::_exit(127);
	}
	::setpgid(pid_, pid_); // also here, so signal_group() works whichever runs first
	if (devnull >= 0)
		::close(devnull);
	if (capture) {
		::close(fds[1]);
		out_ = fds[0];
	} else {
		eof_ = true;
	}
}

ChildProcess::~ChildProcess()
{
	if (!reaped_) {
		signal_group(SIGKILL);
		int st = 0;
		::waitpid(pid_, &st, 0);
	}
	if (out_ >= 0)
		::close(out_);
}

std::optional<std::string> ChildProcess::read_line(std::chrono::milliseconds timeout)
{
	const auto deadline = std::chrono::steady_clock::now() + timeout;
	for (;;) {
		const size_t newline = buffer_.find('\n');
		if (newline != std::string::npos) {
			std::string line = buffer_.substr(0, newline);
			buffer_.erase(0, newline + 1);
			return line;
		}
		if (eof_) {
			if (buffer_.empty())
				return std::nullopt;
			std::string rest;
			rest.swap(buffer_);
			return rest;
		}
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
		if (left.count() <= 0)
			return std::nullopt;
		pollfd p{out_, POLLIN, 0};
		const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0)
			return std::nullopt;
		char chunk[4096];
		const ssize_t n = ::read(out_, chunk, sizeof chunk);
		if (n > 0)
			buffer_.append(chunk, static_cast<size_t>(n));
		else if (n == 0 || (errno != EINTR && errno != EAGAIN))
			eof_ = true;
	}
}

bool ChildProcess::exited()
{
	if (reaped_)
		return true;
	int st = 0;
	const pid_t r = ::waitpid(pid_, &st, WNOHANG);
	if (r != pid_)
		return false;
	reaped_ = true;
	status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	// What it left behind in its group (daemons, ranks it did not reap) goes with it.
	::kill(-pid_, SIGKILL);
	return true;
}

void ChildProcess::signal_group(int sig)
{
	if (pid_ > 0)
		::kill(-pid_, sig);
}

int ChildProcess::wait(std::chrono::milliseconds timeout)
{
	using Clock = std::chrono::steady_clock;
	const auto poll_until = [&](Clock::time_point deadline) {
		while (!exited() && Clock::now() < deadline)
			std::this_thread::sleep_for(std::chrono::milliseconds(20));
		return reaped_;
	};
	if (poll_until(Clock::now() + timeout))
		return status_;
	signal_group(SIGTERM);
	if (poll_until(Clock::now() + std::chrono::seconds(5)))
		return status_;
	signal_group(SIGKILL);
	while (!exited())
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
	return status_;
}

} // namespace tower::cli
