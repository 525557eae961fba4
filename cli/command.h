// How the tower executable's subcommands plug into main: each adds itself and returns a runner.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "base/mpi/world.h"

namespace tower::cli {

// A subcommand registered with CLI11 and the function that runs it once MPI is up.
struct Command {
	CLI::App* app = nullptr;
	std::function<int(World&)> run;
};

Command add_info_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);
Command add_train_command(CLI::App& parent);

// A subcommand that needs no MPI: it runs without mpirun and without MPI_Init.
struct LocalCommand {
	CLI::App* app = nullptr;
	std::function<int()> run;
};

LocalCommand add_plot_command(CLI::App& parent);
LocalCommand add_sample_command(CLI::App& parent);
LocalCommand add_elastic_command(CLI::App& parent);

} // namespace tower::cli
