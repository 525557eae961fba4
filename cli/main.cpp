// The tower executable: parses the command line and runs one subcommand under MPI.
#include <vector>

#include <CLI/CLI.hpp>

#include "base/device/denormals.h"
#include "base/field_spelling.h"
#include "cli/command.h"
#include "cli/train/field_options.h"
#include "cli/option_style.h"
#include "cli/run_guarded.h"
#include "tower_config.h"

int main(int argc, char** argv)
{
	// Before any thread starts, so that every thread of the process inherits it.
	tower::flush_denormals_on_this_thread();
	CLI::App app{"tower: data-parallel training launched with MPI.\n"
		     "Run it under mpirun, one rank per GPU (or per CPU tower), e.g.\n"
		     "  mpirun -np 2 tower info"};
	app.set_version_flag("--version", TOWER_VERSION);
	// The library names its options' fields by id; this command line spells `fusion_mb` --fusion-mb.
	tower::set_field_spelling(tower::cli::flag_of);
	app.require_subcommand(1);

	const std::vector<tower::cli::Command> commands = {
		tower::cli::add_info_command(app),
		tower::cli::add_bench_command(app),
		tower::cli::add_train_command(app),
	};
	const tower::cli::LocalCommand plot = tower::cli::add_plot_command(app);
	const tower::cli::LocalCommand sample = tower::cli::add_sample_command(app);
	const tower::cli::LocalCommand elastic = tower::cli::add_elastic_command(app);
	tower::cli::apply_option_style(app);

	try {
		app.parse(argc, argv);
	} catch (const CLI::ParseError& e) {
		return app.exit(e);
	}

	if (plot.app->parsed())
		return plot.run();
	if (sample.app->parsed())
		return sample.run();
	if (elastic.app->parsed())
		return elastic.run();
	for (const auto& command : commands)
		if (command.app->parsed())
			return tower::cli::run_guarded(&argc, &argv, command.run);
	return 1;
}
