// tower elastic: runs tower train (or a program that checkpoints through tower) under mpirun and,
// when a rank or a host is lost, relaunches it from its latest checkpoint at the largest size left
// (docs/launch-and-observe.md, "Elastic").
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "cli/command.h"
#include "cli/elastic/elastic_hosts.h"
#include "cli/elastic/elastic_job.h"
#include "cli/elastic/elastic_options.h"

namespace tower::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<int> stop_signal{0};

void on_stop_signal(int sig)
{
	stop_signal.store(sig);
}

void say(const std::string& line)
{
	std::fprintf(stdout, "tower elastic: %s\n", line.c_str());
	std::fflush(stdout);
}

// The newest step with a manifest in the checkpoint directory; -1 when there is none (or the
// launcher cannot see the directory).
int64_t latest_checkpoint(const std::string& dir)
{
	for (const auto& [step, path] : step_dirs(dir)) // newest first
		if (std::error_code ec; fs::exists(path / manifest_name, ec))
			return step;
	return -1;
}

std::string self_path()
{
	std::error_code ec;
	const fs::path p = fs::read_symlink("/proc/self/exe", ec);
	return ec ? std::string("tower") : p.string();
}

// Why a generation ended, for people.
std::string ending(const GenerationOutcome& o)
{
	if (o.interrupted)
		return "the launcher was told to stop";
	if (!o.lost_hosts.empty())
		return fmt::format("host {} lost", fmt::join(o.lost_hosts, ", "));
	if (!o.lost_ranks.empty())
		return fmt::format("rank {} on {} killed by signal {}", o.lost_ranks[0].rank, o.lost_ranks[0].node,
				   o.lost_ranks[0].signal);
	if (o.status == 0)
		return "finished";
	if (!o.first_error.empty())
		return fmt::format("exit status {} ({})", o.status, o.first_error);
	return fmt::format("exit status {}", o.status);
}

// Why a restart would not help, or empty when it may.
std::string why_not_restart(const GenerationOutcome& o, const ElasticOptions& opt, int restarts)
{
	const bool lost = !o.lost_ranks.empty() || !o.lost_hosts.empty();
	if (!lost && (o.status == 2 || (o.status >= 100 && o.status < 128)))
		return fmt::format("every rank stopped on the same error (exit status {}): a bad option, missing data or "
				   "an unusable checkpoint, which a restart cannot fix", o.status);
	if (!lost && o.last_step < 0)
		return "it failed before its first step with no rank or host lost: a restart would fail the same way";
	if (restarts >= opt.max_restarts)
		return fmt::format("--max-restarts {} reached", opt.max_restarts);
	return {};
}

struct Sizing {
	int size = 0;
	std::vector<HostSlots> hosts; // with a hostfile: those left, with their slots
};

// The largest size left after `o`: a killed rank's slot and every slot of a silent host are gone.
Sizing size_after(const GenerationOutcome& o, const ElasticOptions& opt, const Sizing& before)
{
	Sizing next = before;
	if (opt.hostfile.empty()) {
		next.size = before.size - static_cast<int>(o.lost_ranks.size());
		return next;
	}
	for (const LostRank& r : o.lost_ranks) {
		const auto h = std::find_if(next.hosts.begin(), next.hosts.end(), [&](const HostSlots& s) { return s.host == r.node; });
		if (h != next.hosts.end())
			--h->slots;
	}
	std::vector<HostSlots> candidates;
	for (const HostSlots& h : next.hosts)
		if (h.slots > 0)
			candidates.push_back(h);
	if (o.lost_hosts.empty() && !o.lost_ranks.empty()) {
		// mpirun heard of each death from the daemon on its host: every host still answers.
		next.hosts = candidates;
		next.size = std::min(before.size, total_slots(next.hosts));
		return next;
	}
	say(fmt::format("asking {} host(s) whether they answer (at most {:.0f} s)", candidates.size(), opt.probe_timeout_s));
	const std::vector<bool> answered = probe_hosts(opt, candidates);
	next.hosts.clear();
	for (size_t i = 0; i < candidates.size(); ++i) {
		if (answered[i])
			next.hosts.push_back(candidates[i]);
		else
			say(fmt::format("host {} does not answer: left out", candidates[i].host));
	}
	next.size = std::min(before.size, total_slots(next.hosts));
	return next;
}

// The launcher's state across generations.
struct Launch {
	const ElasticOptions& opt;
	std::string scratch; // hostfiles of each generation
	Sizing sizing;
	nlohmann::json history = nlohmann::json::array();
	int64_t steps_lost = 0;
	std::optional<Clock::time_point> previous_failure;
};

// mpirun's command line for one generation, said for people first.
std::vector<std::string> generation_argv(const Launch& l, int generation)
{
	const ElasticOptions& opt = l.opt;
	std::vector<std::string> argv = {opt.mpirun};
	argv.insert(argv.end(), opt.mpirun_args.begin(), opt.mpirun_args.end());
	argv.insert(argv.end(), {"-np", std::to_string(l.sizing.size)});
	if (!opt.hostfile.empty()) {
		const std::string file = fmt::format("{}/hostfile-{}", l.scratch, generation);
		write_hostfile(file, l.sizing.hosts);
		argv.insert(argv.end(), {"--hostfile", file});
	}
	// A relaunch resumes from the newest checkpoint of its own directory, not from where the
	// first generation was told to start (a --resume PATH of the command would lose every
	// step since); with none there yet, the command runs as given. A program of its own learns
	// it from TOWER_RESUME, which run_elastic() puts in the environment.
	const int64_t checkpoint = latest_checkpoint(opt.checkpoint_dir);
	const bool relaunch_resumes = generation > 1 && checkpoint >= 0;
	if (opt.program) {
		// What the program learns from the launcher, on every host (mpirun passes only what it is
		// told to a remote daemon's ranks).
		for (const char* name : {"TOWER_CHECKPOINT_DIR", "TOWER_RESUME", "TOWER_ELASTIC_GENERATION",
					 "TOWER_ELASTIC_HISTORY"})
			argv.insert(argv.end(), {"-x", name});
		argv.insert(argv.end(), opt.command.begin(), opt.command.end());
	} else {
		argv.push_back(self_path());
		const std::vector<std::string> command = relaunch_resumes ? without_resume(opt.command) : opt.command;
		argv.insert(argv.end(), command.begin(), command.end());
		if (relaunch_resumes)
			argv.push_back("--resume");
	}
	say(fmt::format("generation {}: {} rank(s){}{}", generation, l.sizing.size,
			opt.hostfile.empty() ? std::string() : fmt::format(" on {} host(s)", l.sizing.hosts.size()),
			generation == 1 ? std::string()
			: checkpoint >= 0 ? fmt::format(", resuming from the checkpoint of step {}", checkpoint)
					  : std::string(", from the start (no checkpoint yet)")));
	return argv;
}

// The generation's entry in the history; the steps the previous one completed after this one's
// checkpoint were lost, and the time from its failure to this one's first step is the restart's.
void record_generation(Launch& l, int generation, const GenerationOutcome& o)
{
	nlohmann::json entry = {{"generation", generation}, {"ranks", l.sizing.size}, {"ended", ending(o)},
				{"status", o.status}, {"start_step", o.start_step}, {"last_step", o.last_step}};
	if (!l.history.empty() && o.start_step >= 0) {
		nlohmann::json& prev = l.history.back();
		const int64_t lost = std::max<int64_t>(0, prev["last_step"].get<int64_t>() - o.start_step);
		prev["steps_lost"] = lost;
		l.steps_lost += lost;
		if (l.previous_failure && o.first_step_at)
			entry["restart_s"] = std::chrono::duration<double>(*o.first_step_at - *l.previous_failure).count();
	}
	l.history.push_back(entry);
	say(fmt::format("generation {} ended: {}{}", generation, ending(o),
			entry.contains("restart_s") ? fmt::format(" (its first step came {:.1f} s after the previous failure)",
								  entry["restart_s"].get<double>())
						    : std::string()));
}

// The launcher's exit status when it stops after `o`, or nothing when it relaunches (at the size
// it has set).
std::optional<int> stop_or_resize(Launch& l, const GenerationOutcome& o, int restarts)
{
	if (o.status == 0 || o.interrupted)
		return o.interrupted ? 128 + stop_signal.load() : 0;
	if (const std::string why = why_not_restart(o, l.opt, restarts); !why.empty()) {
		say(fmt::format("not restarting: {}", why));
		return o.status == 0 ? 1 : o.status;
	}
	const Sizing next = size_after(o, l.opt, l.sizing);
	if (next.size < l.opt.min_np) {
		say(fmt::format("not restarting: {} rank(s) left, fewer than --min-np {}", next.size, l.opt.min_np));
		return o.status;
	}
	l.sizing = next;
	l.previous_failure = o.failure_at;
	return std::nullopt;
}

int run_elastic(const ElasticOptions& opt)
{
	std::signal(SIGINT, on_stop_signal);
	std::signal(SIGTERM, on_stop_signal);
	char scratch_template[] = "/tmp/tower-elastic-XXXXXX";
	const char* scratch = ::mkdtemp(scratch_template);
	if (scratch == nullptr)
		throw Error("tower elastic: cannot make a temporary directory in /tmp");
	Launch l{opt, scratch, {opt.np, opt.hostfile.empty() ? std::vector<HostSlots>{} : read_hostfile(opt.hostfile)},
		 nlohmann::json::array(), 0, std::nullopt};
	if (!opt.hostfile.empty() && total_slots(l.sizing.hosts) < opt.np)
		throw Error(fmt::format("tower elastic -np {}: the hostfile {} has {} slot(s)", opt.np, opt.hostfile,
					total_slots(l.sizing.hosts)));
	int exit_status = 0;
	for (int generation = 1, restarts = 0;; ++generation, ++restarts) {
		const std::vector<std::string> argv = generation_argv(l, generation);
		std::vector<std::pair<std::string, std::string>> env = {
			{"TOWER_ELASTIC_GENERATION", std::to_string(generation)}, {"TOWER_ELASTIC_HISTORY", l.history.dump()}};
		if (opt.program) {
			// A program's checkpoints: where they are, and whether this generation resumes one.
			env.emplace_back("TOWER_CHECKPOINT_DIR", opt.checkpoint_dir);
			env.emplace_back("TOWER_RESUME", generation > 1 && latest_checkpoint(opt.checkpoint_dir) >= 0 ? "1" : "0");
		}
		const auto exit_grace = std::chrono::milliseconds(static_cast<int64_t>(1000 * opt.exit_grace_s));
		const GenerationOutcome o = run_generation(argv, env, exit_grace, stop_signal);
		record_generation(l, generation, o);
		if (const std::optional<int> status = stop_or_resize(l, o, restarts)) {
			exit_status = *status;
			break;
		}
	}
	const nlohmann::json summary = {{"event", "elastic"}, {"generations", l.history.size()},
					{"restarts", l.history.size() - 1}, {"world_size", l.sizing.size},
					{"steps_lost", l.steps_lost}, {"exit_status", exit_status},
					{"history", l.history}};
	say(fmt::format("summary {}", summary.dump()));
	std::error_code ec;
	fs::remove_all(l.scratch, ec);
	return exit_status;
}

} // namespace

LocalCommand add_elastic_command(CLI::App& parent)
{
	CLI::App* app = parent.add_subcommand("elastic", "Run tower train (or a program that checkpoints through tower) "
							 "under mpirun and relaunch it from its latest checkpoint at a smaller "
							 "size when a rank or host is lost");
	app->prefix_command();
	app->allow_extras();
	app->set_help_flag(); // its own usage: -h would otherwise be taken from mpirun's options
	app->footer(elastic_usage);
	return {app, [app] {
		std::vector<std::string> args = app->remaining();
		if (args.empty() || args.front() == "--help" || args.front() == "-h") {
			std::puts(elastic_usage);
			return args.empty() ? 1 : 0;
		}
		try {
			return run_elastic(parse_elastic_options(args));
		} catch (const std::exception& e) {
			std::fprintf(stderr, "error: %s\n", e.what());
			return 2;
		}
	}};
}

} // namespace tower::cli
