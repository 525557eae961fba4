// `tower plot`: draws metrics and bench files by running tower-plot.py (matplotlib) found beside tower.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"

namespace tower::cli {

namespace {

namespace fs = std::filesystem;

struct PlotOptions {
	std::vector<std::string> runs;
	std::vector<std::string> bench;
	std::string output;
};

// The script where `meson install` puts it (PREFIX/LIBEXECDIR/tower, PREFIX being the directory
// above BINDIR holding this executable, so a relocated or DESTDIR install works too), or, for the
// tower in its build tree, the source tree's. TOWER_PLOT_SCRIPT overrides both. Empty, having said
// where it looked, when there is none.
fs::path find_script()
{
	if (const char* forced = std::getenv("TOWER_PLOT_SCRIPT"); forced && *forced)
		return forced;
	std::error_code error;
	const fs::path exe_dir = fs::read_symlink("/proc/self/exe", error).parent_path();
	fs::path script;
	if (fs::equivalent(exe_dir, TOWER_BUILD_ROOT, error)) {
		script = TOWER_SOURCE_PLOT_SCRIPT;
	} else if (const fs::path libexec(TOWER_LIBEXECDIR); libexec.is_absolute()) {
		script = libexec / "tower" / "tower-plot.py";
	} else {
		fs::path prefix = exe_dir;
		for (const auto& part : fs::path(TOWER_BINDIR))
			if (!part.empty())
				prefix = prefix.parent_path();
		script = prefix / libexec / "tower" / "tower-plot.py";
	}
	if (fs::exists(script, error))
		return script;
	std::fprintf(stderr, "error: tower plot's script %s is missing; reinstall tower or set TOWER_PLOT_SCRIPT "
			     "to tower-plot.py's path\n", script.c_str());
	return {};
}

// Debian's python3-matplotlib belongs to /usr/bin/python3, which may not be the first python3 on PATH.
std::string find_python()
{
	if (const char* forced = std::getenv("TOWER_PYTHON"))
		return forced;
	return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

int run_plot(const PlotOptions& o)
{
	const std::string python = find_python();
	const std::string script = find_script().string();
	if (script.empty())
		return 1;
	std::vector<std::string> args = {python, script};
	for (const std::string& run : o.runs)
		args.push_back(run);
	for (const std::string& bench : o.bench) {
		args.push_back("--bench");
		args.push_back(bench);
	}
	if (!o.output.empty()) {
		args.push_back("-o");
		args.push_back(o.output);
	}
	std::vector<char*> argv;
	for (std::string& a : args)
		argv.push_back(a.data());
	argv.push_back(nullptr);
	execvp(argv[0], argv.data());
	std::fprintf(stderr, "error: cannot run %s: %s; install python3 and python3-matplotlib (scripts/setup-deps) "
			     "or set TOWER_PYTHON\n", python.c_str(), std::strerror(errno));
	return 1;
}

} // namespace

LocalCommand add_plot_command(CLI::App& parent)
{
	auto o = std::make_shared<PlotOptions>();
	CLI::App* app = parent.add_subcommand(
		"plot", "Draw runs' metrics (loss, test accuracy, samples/s, all-reduce time against steps) or bench rows "
			"(busbw against size per mode) into a PNG; needs python3-matplotlib");
	app->add_option("runs", o->runs, "Metrics files of `tower train --metrics` (several are overlaid)");
	app->add_option("--bench", o->bench, "JSON lines of `tower bench allreduce --json` (repeatable)");
	app->add_option("-o,--output", o->output, "The PNG to write (default: beside the first input, .png)");
	app->callback([o] {
		if (o->runs.empty() == o->bench.empty())
			throw CLI::ValidationError("tower plot", "give metrics files, or --bench files, not both or neither");
	});
	return {app, [o] { return run_plot(*o); }};
}

} // namespace tower::cli
