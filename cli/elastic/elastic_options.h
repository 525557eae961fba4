// The options of tower elastic: its own, mpirun's (passed through), and the tower command it runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tower::cli {

struct ElasticOptions {
	int np = 0;           // ranks of the first generation
	int min_np = 1;       // give up below this many
	int max_restarts = 3; // give up after this many relaunches
	std::string hostfile; // hosts and their slots; empty: this host only
	std::string mpirun = "mpirun";
	double exit_grace_s = 20; // after a rank or host is lost, how long mpirun may take to end
	double probe_timeout_s = 20; // how long a host has to answer the probe after a loss
	std::vector<std::string> mpirun_args; // everything else before "--", in order
	std::vector<std::string> command;     // after "--": "train" and its options, or a program
	// A program of its own (a PyTorch program checkpointing through tower.torch.Checkpoints)
	// rather than tower train: the launcher runs it as it is and tells it where its checkpoints
	// are and when to resume through the environment (TOWER_CHECKPOINT_DIR, TOWER_RESUME).
	bool program = false;
	// Read from the train command (a program's: --checkpoint-dir before "--"): what a restart
	// needs and what bounds the size.
	std::string checkpoint_dir;
	int ps_ranks = 0;
	std::string strategy = "replicated";
};

// Parses `tower elastic` arguments (argv after "elastic"). Throws tower::Error saying what is
// wrong and what to give instead.
ElasticOptions parse_elastic_options(const std::vector<std::string>& args);

// The smallest world size the train command's strategy runs at (servers need a worker beside them).
int smallest_size(const ElasticOptions& o);

// The value of `--name VALUE` or `--name=VALUE` in `args`; nullopt when absent.
std::optional<std::string> option_value(const std::vector<std::string>& args, const std::string& name);

// The train command less its --resume [PATH] (or --resume=PATH): what a relaunch runs before it
// adds a bare --resume of its own.
std::vector<std::string> without_resume(const std::vector<std::string>& command);

// The usage text after `tower elastic --help`.
extern const char* const elastic_usage;

} // namespace tower::cli
