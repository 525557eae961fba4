// One generation of an elastic job: mpirun run to its end, its output passed on, and what ended it.
#include "cli/elastic/elastic_job.h"

#include <csignal>
#include <cstdio>
#include <string>

#include "cli/elastic/child_process.h"

namespace tower::cli {

namespace {

using Clock = std::chrono::steady_clock;

bool failure_seen(const GenerationOutcome& o)
{
	return !o.lost_ranks.empty() || !o.lost_hosts.empty() || !o.first_error.empty();
}

} // namespace

namespace {

// The whitespace-delimited word after `marker` in `line`, or empty.
std::string word_after(const std::string& line, const std::string& marker)
{
	const size_t at = line.find(marker);
	if (at == std::string::npos)
		return {};
	const size_t from = at + marker.size();
	const size_t to = line.find_first_of(" \t.,", from);
	return line.substr(from, to == std::string::npos ? std::string::npos : to - from);
}

// The whole number after `marker`, or -1.
int64_t number_after(const std::string& line, const std::string& marker)
{
	const std::string w = word_after(line, marker);
	if (w.empty() || w.size() > 18 || w.find_first_not_of("0123456789") != std::string::npos)
		return -1;
	return std::stoll(w);
}

} // namespace

bool read_generation_line(const std::string& line, GenerationOutcome& o)
{
	const auto at = line.find(elastic_line_prefix);
	if (at != std::string::npos) {
		const std::string what = line.substr(at + std::char_traits<char>::length(elastic_line_prefix));
		if (const int64_t step = number_after(what, "step "); what.rfind("step ", 0) == 0 && step >= 0) {
			o.last_step = step;
			if (!o.first_step_at)
				o.first_step_at = Clock::now();
		} else if (const int64_t from = number_after(what, "resumed "); what.rfind("resumed ", 0) == 0 && from >= 0) {
			o.start_step = from;
		} else if (what.rfind("started", 0) == 0) {
			o.start_step = 0;
		}
		return true;
	}
	// Open MPI 4.1: "mpirun noticed that process rank 1 with PID 4242 on node hostA exited on
	// signal 9 (Killed)."; a lost daemon: "ORTE has lost communication with a remote daemon."
	// followed by "  Remote daemon: [[1234,0],2] on node host2".
	const bool before = failure_seen(o);
	const std::string node = word_after(line, " on node ");
	if (line.find("process rank ") != std::string::npos && line.find("exited on signal ") != std::string::npos) {
		o.lost_ranks.push_back({static_cast<int>(number_after(line, "process rank ")), node,
					static_cast<int>(number_after(line, "exited on signal "))});
	} else if (!node.empty() && (line.find("Remote daemon:") != std::string::npos ||
				     line.find("ORTE daemon ") != std::string::npos)) {
		o.lost_hosts.push_back(node);
	} else if (o.first_error.empty() && line.find("[rank ") != std::string::npos &&
		   line.find("] error: ") != std::string::npos) {
		o.first_error = line;
	}
	if (!before && failure_seen(o))
		o.failure_at = Clock::now();
	return false;
}

namespace {

// Reads a line into the outcome and passes it on, unless it is one of the launcher's own.
void pass_on(const std::string& line, GenerationOutcome& o)
{
	if (read_generation_line(line, o))
		return;
	std::fwrite(line.data(), 1, line.size(), stdout);
	std::fputc('\n', stdout);
	std::fflush(stdout);
}

} // namespace

GenerationOutcome run_generation(const std::vector<std::string>& argv,
				 const std::vector<std::pair<std::string, std::string>>& env,
				 std::chrono::milliseconds exit_grace, const std::atomic<int>& stop)
{
	GenerationOutcome o;
	ChildProcess mpirun(argv, env, true);
	bool told_to_stop = false;
	for (;;) {
		// Every turn, a line or not: a job that keeps printing must still be stopped on time.
		if (const auto line = mpirun.read_line(std::chrono::milliseconds(100)))
			pass_on(*line, o);
		if (stop.load() != 0 && !told_to_stop) {
			told_to_stop = true;
			o.interrupted = true;
			mpirun.signal_group(SIGTERM);
		}
		// A loss seen and mpirun still up after the grace: a daemon it cannot reach may hold it
		// for the TCP retransmission timeout (docs/launch-and-observe.md); it goes.
		const bool overdue = failure_seen(o) && Clock::now() - o.failure_at > exit_grace;
		if (mpirun.eof() || overdue || told_to_stop) {
			if (overdue)
				std::fprintf(stdout, "tower elastic: mpirun did not end %.0f s after the failure; stopping it\n",
					     std::chrono::duration<double>(exit_grace).count());
			const bool seen = failure_seen(o);
			// Its output is still read while it ends (a full pipe would hold it), then the rest,
			// for the causes it names.
			const auto deadline = Clock::now() + (overdue ? std::chrono::milliseconds(0) : exit_grace);
			while (!mpirun.exited() && Clock::now() < deadline)
				if (const auto line = mpirun.read_line(std::chrono::milliseconds(50)))
					pass_on(*line, o);
			o.status = mpirun.wait(std::chrono::milliseconds(0));
			while (const auto line = mpirun.read_line(std::chrono::milliseconds(0)))
				pass_on(*line, o);
			std::fflush(stdout);
			if (!seen)
				o.failure_at = Clock::now();
			return o;
		}
	}
}

} // namespace tower::cli
