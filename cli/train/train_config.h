// Everything `tower train` was asked to do, as parsed from its command line: the library's
// option tables' fields as given (runtime/options/run_fields.h) and the command's own options.
#pragma once

#include <optional>
#include <string>

#include "cli/train/field_options.h"

namespace tower::cli {

struct TrainConfig {
	GivenFields given;   // the tables' fields, by id (--fusion-mb: "fusion_mb")
	std::string data_dir; // default: Fashion-MNIST, or fortunes for the gpt
	std::string device = "auto";
	std::optional<int> threads; // CPU kernel threads per rank (default 1, or OMP_NUM_THREADS)
	std::optional<int> ranks_per_node;
	std::string metrics_path;
	bool resume = false;
	std::string resume_path; // empty with resume: the latest valid checkpoint in the checkpoint directory
	// Run safety: the stall watchdog's limits (seconds; abort 0: never) and collective fingerprints.
	double stall_warn = 60, stall_abort = 600;
	bool debug_collectives = false;
};

} // namespace tower::cli
