// A program run as a child in a process group of its own, its output read line by line.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace tower::cli {

class ChildProcess {
public:
	// Starts argv[0] (found on the PATH) with `env` added to this process's environment. With
	// `capture`, its stdout and stderr come to read_line(); otherwise they go to /dev/null.
	// Throws tower::Error when it cannot be started.
	ChildProcess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
		     bool capture);
	// Kills what is left of its process group and reaps it.
	~ChildProcess();
	ChildProcess(const ChildProcess&) = delete;
	ChildProcess& operator=(const ChildProcess&) = delete;

	pid_t pid() const { return pid_; }
	// The next whole line of its output (without the newline), waiting at most `timeout`;
	// nullopt on timeout or once the output has ended (then eof() is true).
	std::optional<std::string> read_line(std::chrono::milliseconds timeout);
	bool eof() const { return eof_; }
	// Whether it has exited; reaps it when it has.
	bool exited();
	// Its exit status once exited(): the exit code, or 128 + the signal that ended it.
	int status() const { return status_; }
	// Sends `sig` to its whole process group.
	void signal_group(int sig);
	// Waits for it to exit, at most `timeout`; then SIGTERM, and SIGKILL after 5 s more.
	int wait(std::chrono::milliseconds timeout);

private:
	pid_t pid_ = -1;
	int out_ = -1;
	bool eof_ = false, reaped_ = false;
	int status_ = -1;
	std::string buffer_;
};

} // namespace tower::cli
