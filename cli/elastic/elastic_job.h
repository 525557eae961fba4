// One generation of an elastic job: mpirun run to its end, its output passed on, and what ended it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/observe/launcher_lines.h"

namespace tower::cli {

// The lines a run prints for the launcher when TOWER_ELASTIC_GENERATION is set (one rank: tower
// train's rank 0, tower.torch's first worker; runtime/observe/launcher_lines.h): "tower-elastic:
// resumed S" or "tower-elastic: started", then "tower-elastic: step S" after every step. The launcher keeps
// them out of the output it passes on.
inline constexpr const char* elastic_line_prefix = launcher_line_prefix;

struct LostRank {
	int rank = -1;
	std::string node;
	int signal = 0;
};

struct GenerationOutcome {
	int status = 0; // mpirun's exit status (128 + the signal that ended it, if one did)
	std::vector<LostRank> lost_ranks;    // ranks that died from a signal (mpirun names the first)
	std::vector<std::string> lost_hosts; // hosts whose daemon mpirun lost
	bool interrupted = false;            // the launcher was told to stop
	std::chrono::steady_clock::time_point failure_at; // the first sign of the failure, or the exit
	int64_t start_step = -1; // the step it started at (resumed from); -1 when it never said
	int64_t last_step = -1;  // the last step it completed; -1: none
	std::optional<std::chrono::steady_clock::time_point> first_step_at; // its first completed step
	std::string first_error; // the first "error:" line a rank printed
};

// Runs `argv` (mpirun ...) with `env` added, passes its output on to stdout, and returns when it
// has ended. Once a loss is seen, mpirun has `exit_grace` to end before it is killed. When
// `stop` turns nonzero (a signal to the launcher), mpirun's process group gets SIGTERM.
GenerationOutcome run_generation(const std::vector<std::string>& argv,
				 const std::vector<std::pair<std::string, std::string>>& env,
				 std::chrono::milliseconds exit_grace, const std::atomic<int>& stop);

// What mpirun's and tower's lines say, for run_generation (and tests): one line into `outcome`.
// True when the line is a launcher line that should not be passed on.
bool read_generation_line(const std::string& line, GenerationOutcome& outcome);

} // namespace tower::cli
