// One generation of an elastic job: mpirun run to its end, its output passed on, and what ended it.
#include "cli/elastic_job.h"

#include <csignal>
#include <cstdio>
#include <regex>

#include "cli/child_process.h"

namespace tower::cli {

namespace {

using Clock = std::chrono::steady_clock;

bool failure_seen(const GenerationOutcome& o)
{
	return !o.lost_ranks.empty() || !o.lost_hosts.empty() || !o.first_error.empty();
}

} // namespace

bool read_generation_line(const std::string& line, GenerationOutcome& o)
{
	// Open MPI 4.1: "mpirun noticed that process rank 1 with PID 4242 on node hostA exited on
	// signal 9 (Killed)."; a lost daemon: "ORTE has lost communication with a remote daemon."
	// followed by "  Remote daemon: [[1234,0],2] on node host2".
	static const std::regex rank_died(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+))");
	static const std::regex daemon_lost(R"(Remote daemon:.* on node (\S+))");
	static const std::regex daemon_failed(R"(ORTE daemon .*on node (\S+))");
	static const std::regex rank_error(R"(\[rank \d+\] error: )");
	const auto at = line.find(elastic_line_prefix);
	if (at != std::string::npos) {
		const std::string what = line.substr(at + std::char_traits<char>::length(elastic_line_prefix));
		if (what.rfind("step ", 0) == 0) {
			o.last_step = std::stoll(what.substr(5));
			if (!o.first_step_at)
				o.first_step_at = Clock::now();
		} else if (what.rfind("resumed ", 0) == 0) {
			o.start_step = std::stoll(what.substr(8));
		} else if (what.rfind("started", 0) == 0) {
			o.start_step = 0;
		}
		return true;
	}
	const bool before = failure_seen(o);
	std::smatch m;
	if (std::regex_search(line, m, rank_died))
		o.lost_ranks.push_back({std::stoi(m[1].str()), m[2].str(), std::stoi(m[3].str())});
	else if (std::regex_search(line, m, daemon_lost) || std::regex_search(line, m, daemon_failed))
		o.lost_hosts.push_back(m[1].str());
	else if (o.first_error.empty() && std::regex_search(line, rank_error))
		o.first_error = line;
	if (!before && failure_seen(o))
		o.failure_at = Clock::now();
	return false;
}

GenerationOutcome run_generation(const std::vector<std::string>& argv,
				 const std::vector<std::pair<std::string, std::string>>& env,
				 std::chrono::milliseconds exit_grace, const std::atomic<int>& stop)
{
	GenerationOutcome o;
	ChildProcess mpirun(argv, env, true);
	bool told_to_stop = false;
	for (;;) {
		if (const auto line = mpirun.read_line(std::chrono::milliseconds(100))) {
			if (!read_generation_line(*line, o)) {
				std::fwrite(line->data(), 1, line->size(), stdout);
				std::fputc('\n', stdout);
				std::fflush(stdout);
			}
			continue;
		}
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
			o.status = mpirun.wait(overdue ? std::chrono::milliseconds(0) : exit_grace);
			// The rest of its output, for the causes it names.
			while (const auto line = mpirun.read_line(std::chrono::milliseconds(0)))
				if (!read_generation_line(*line, o)) {
					std::fwrite(line->data(), 1, line->size(), stdout);
					std::fputc('\n', stdout);
				}
			std::fflush(stdout);
			if (!seen)
				o.failure_at = Clock::now();
			return o;
		}
	}
}

} // namespace tower::cli
