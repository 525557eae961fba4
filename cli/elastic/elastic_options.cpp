// The options of tower elastic: its own, mpirun's (passed through), and the tower command it runs.
#include "cli/elastic/elastic_options.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "base/error.h"

namespace tower::cli {

const char* const elastic_usage = R"(tower elastic: run tower train (or a program that checkpoints through tower) under
mpirun and, when a rank or a host is lost, relaunch it from its latest checkpoint at the largest
size that is left.

  tower elastic -np N [--min-np M] [--max-restarts K] [--hostfile F] [MPIRUN OPTIONS] -- train OPTIONS
  tower elastic -np N --checkpoint-dir DIR [...] -- PROGRAM ARGS   (e.g. /usr/bin/python3 train.py)

  -np N              ranks of the first generation (also -n, --np)
  --min-np M         give up when fewer than M ranks are left (default 1)
  --max-restarts K   give up after K relaunches (default 3)
  --hostfile F       the hosts and their slots (mpirun's format: "HOST slots=S"); after a loss, the
                     hosts that no longer answer are left out. Without it, this host only.
  --mpirun PATH      the mpirun to run (default: mpirun on the PATH)
  --exit-grace S     seconds mpirun may take to end after a loss before it is killed (default 20)
  --probe-timeout S  seconds a host has to answer after a loss (default 20)
  --checkpoint-dir D a program's checkpoint directory (not tower train's: it has its own). The
                     program gets it as TOWER_CHECKPOINT_DIR, and TOWER_RESUME=1 on a relaunch that
                     has a checkpoint to resume; tower.torch.Checkpoints reads both (docs/torch.md)
  anything else before "--" goes to mpirun as it is (--oversubscribe, --mca ..., --map-by ...).

The train command needs --checkpoint-dir (a restart resumes from its latest checkpoint; give
--checkpoint-every K to lose fewer than K steps). A rank killed from outside takes its slot out of
the job; a host that does not answer takes all of its slots. A failure that a restart cannot fix
(a bad option, missing data: every rank reports the same error) is not restarted.)";

namespace {

int to_int(const std::string& flag, const std::string& text)
{
	int value = 0;
	const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
	if (ec != std::errc{} || end != text.data() + text.size())
		throw Error(fmt::format("tower elastic {} {}: give a whole number", flag, text));
	return value;
}

double to_seconds(const std::string& flag, const std::string& text)
{
	try {
		size_t used = 0;
		const double value = std::stod(text, &used);
		if (used == text.size() && value > 0 && value < 86400)
			return value;
	} catch (const std::exception&) {
	}
	throw Error(fmt::format("tower elastic {} {}: give seconds, more than 0", flag, text));
}

void read_train_command(ElasticOptions& o)
{
	if (o.command.empty())
		throw Error("tower elastic: no command after \"--\"; e.g. tower elastic -np 3 -- train --checkpoint-dir "
			    "ckpt --checkpoint-every 100");
	o.program = o.command.front() != "train";
	if (o.program) {
		if (o.checkpoint_dir.empty())
			throw Error(fmt::format("tower elastic: '{}' is not tower train, so give its checkpoint directory as "
						"--checkpoint-dir DIR before \"--\" (the program's tower.torch.Checkpoints "
						"get it as TOWER_CHECKPOINT_DIR; a restart resumes from the latest checkpoint there)",
						o.command.front()));
		return;
	}
	if (!o.checkpoint_dir.empty())
		throw Error("tower elastic --checkpoint-dir is a program's; tower train takes its own --checkpoint-dir after "
			    "\"--\"");
	o.checkpoint_dir = option_value(o.command, "--checkpoint-dir").value_or("");
	if (o.checkpoint_dir.empty())
		throw Error("tower elastic: the train command has no --checkpoint-dir; a restart resumes from the latest "
			    "checkpoint there (add --checkpoint-dir DIR --checkpoint-every K)");
	o.strategy = option_value(o.command, "--strategy").value_or("replicated");
	if (const auto k = option_value(o.command, "--ps-ranks"))
		o.ps_ranks = to_int("--ps-ranks", *k);
	if (option_value(o.command, "--groups"))
		throw Error("tower elastic: --groups cannot be checkpointed (each group holds its own parameters), so a "
			    "restart could not resume it; drop --groups");
}

} // namespace

std::optional<std::string> option_value(const std::vector<std::string>& args, const std::string& name)
{
	std::optional<std::string> found;
	for (size_t i = 0; i < args.size(); ++i) {
		if (args[i] == name && i + 1 < args.size())
			found = args[i + 1];
		else if (args[i].rfind(name + "=", 0) == 0)
			found = args[i].substr(name.size() + 1);
	}
	return found;
}

std::vector<std::string> without_resume(const std::vector<std::string>& command)
{
	std::vector<std::string> out;
	for (size_t i = 0; i < command.size(); ++i) {
		if (command[i].rfind("--resume=", 0) == 0)
			continue;
		if (command[i] == "--resume") {
			if (i + 1 < command.size() && command[i + 1].rfind("-", 0) != 0)
				++i;
			continue;
		}
		out.push_back(command[i]);
	}
	return out;
}

ElasticOptions parse_elastic_options(const std::vector<std::string>& args)
{
	ElasticOptions o;
	const auto dashes = std::find(args.begin(), args.end(), "--");
	const std::vector<std::string> mine(args.begin(), dashes);
	if (dashes != args.end())
		o.command.assign(dashes + 1, args.end());
	bool np_given = false;
	for (size_t i = 0; i < mine.size(); ++i) {
		const std::string& a = mine[i];
		auto value = [&]() -> const std::string& {
			if (i + 1 >= mine.size())
				throw Error(fmt::format("tower elastic {}: the value is missing", a));
			return mine[++i];
		};
		if (a == "-np" || a == "-n" || a == "--np" || a == "-c") {
			o.np = to_int(a, value());
			np_given = true;
		} else if (a == "--min-np") {
			o.min_np = to_int(a, value());
		} else if (a == "--max-restarts") {
			o.max_restarts = to_int(a, value());
		} else if (a == "--hostfile" || a == "--machinefile" || a == "-hostfile" || a == "-machinefile") {
			o.hostfile = value();
		} else if (a == "--mpirun") {
			o.mpirun = value();
		} else if (a == "--exit-grace") {
			o.exit_grace_s = to_seconds(a, value());
		} else if (a == "--probe-timeout") {
			o.probe_timeout_s = to_seconds(a, value());
		} else if (a == "--checkpoint-dir") {
			o.checkpoint_dir = value();
		} else if (a == "--host" || a == "-H" || a == "--hosts") {
			throw Error(fmt::format("tower elastic {}: give the hosts as --hostfile F (\"HOST slots=S\" per line), "
						"so the launcher can leave out the ones that are lost", a));
		} else {
			o.mpirun_args.push_back(a);
		}
	}
	if (!np_given || o.np < 1)
		throw Error("tower elastic: give -np N, the ranks of the first generation (N >= 1)");
	if (o.min_np < 1 || o.min_np > o.np)
		throw Error(fmt::format("tower elastic --min-np {}: give 1 to -np ({})", o.min_np, o.np));
	if (o.max_restarts < 0)
		throw Error(fmt::format("tower elastic --max-restarts {}: give 0 or more", o.max_restarts));
	read_train_command(o);
	if (smallest_size(o) > o.np)
		throw Error(fmt::format("tower elastic -np {}: the {} strategy with these options needs at least {} ranks",
					o.np, o.strategy, smallest_size(o)));
	o.min_np = std::max(o.min_np, smallest_size(o));
	return o;
}

int smallest_size(const ElasticOptions& o)
{
	// Servers only serve: at least one worker beside them.
	return o.ps_ranks > 0 ? o.ps_ranks + 1 : 1;
}

} // namespace tower::cli
