// `tower train`: the command line of training a built-in model (the classifiers on Fashion-MNIST, the GPT
// on text); the library's trainer does the run. Its options are the rows of the library's option
// tables (runtime/options/run_fields.h) and a few of its own: data, device, files, patience.
#include <memory>
#include <optional>

#include "runtime/options/names.h"
#include "base/mpi/agree.h"
#include "base/watchdog/collective_debug.h"
#include "base/watchdog/watched_wait.h"
#include "cli/command.h"
#include "cli/train/train_config.h"
#include "cli/train/train_options.h"
#include "cli/train/train_report.h"
#include "data/fashion_mnist.h"
#include "data/text_corpus.h"
#include "models/kernels/cpu/cpu_threads.h"
#include "models/model_factory.h"
#include "runtime/options/field_rules.h"
#include "runtime/options/run_fields.h"
#include "runtime/training/trainer.h"

namespace tower::cli {

namespace {

void add_command_options(CLI::App& app, TrainConfig& c)
{
	app.add_option("--data", c.data_dir,
		       "mlp, cnn: directory of the Fashion-MNIST *-ubyte.gz files; gpt: a text file or directory "
		       "(default: Debian's fortunes, " + default_text_dir() + ")");
	app.add_option("--device", c.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
	app.add_option("--threads", c.threads,
		       "CPU kernel threads per rank (default 1, or OMP_NUM_THREADS: the ranks fill the cores)")
		->check(CLI::PositiveNumber);
	app.add_option("--ranks-per-node", c.ranks_per_node, "Simulated nodes of this many ranks")->check(CLI::PositiveNumber);
	app.add_option("--metrics", c.metrics_path, "Write JSON lines of metrics to this file (rank 0)");
	app.add_option("--resume", c.resume_path,
		       "Continue from the latest valid checkpoint in --checkpoint-dir, or from PATH")
		->expected(0, 1);
	app.add_option("--stall-warn", c.stall_warn, "Seconds a rank waits for the others before it names who has not arrived")
		->check(CLI::NonNegativeNumber);
	app.add_option("--stall-abort", c.stall_abort, "Seconds a rank waits before it aborts the job (0: never)")
		->check(CLI::NonNegativeNumber);
	app.add_flag("--debug-collectives", c.debug_collectives,
		     "Before each collective, compare what every rank calls (also TOWER_DEBUG=collectives)");
}

// What this command line decides before the trainer sees it (the topology, which data is loaded,
// the model) is compared first, before any collective it decides; the trainer compares the rest.
RunFingerprint program_fields(World& world, const TrainConfig& c, const ModelConfig& model, int eval_every)
{
	RunFingerprint f;
	describe_fields(f, model_fields(), model);
	f.add("`ranks_per_node`", c.ranks_per_node ? std::to_string(*c.ranks_per_node) : "none");
	f.add("`eval_every`", eval_every);
	describe_build(f);
	check_run_agreement(world.comm(), f);
	return f;
}

// Each rank reads its own command line. What one rank cannot read must end every rank (the others
// would wait for it in the agreement), so the verdict of the reading is agreed first.
template <typename Read> auto read_agreed(MPI_Comm comm, Read read) -> decltype(read())
{
	std::optional<decltype(read())> value;
	std::string problem;
	try {
		value = read();
	} catch (const AgreedError& e) {
		problem = e.what();
	}
	agree(comm, problem);
	return std::move(*value);
}

// Whether a test set is loaded is decided before the trainer's configuration is.
int eval_every_of(const TrainConfig& c)
{
	TrainerConfig t;
	if (const auto given = c.given.find("eval_every"); given != c.given.end())
		find_field(trainer_fields(), "eval_every")->set(t, given->second);
	return t.eval_every;
}

template <typename Train, typename Test>
int train_on(World& world, const TrainConfig& c, const Topology& topology, const Device& device, Model& model,
	     const Train& train, const Test& test, const TrainerConfig& config)
{
	TrainReport report(world.comm(), c.metrics_path);
	Trainer trainer(topology, device, model, train, test, config, &report);
	trainer.run();
	return 0;
}

int run_training(World& world, const TrainConfig& c)
{
	set_stall_limits({c.stall_warn, c.stall_abort});
	if (c.debug_collectives)
		set_collective_debug(true);
	const ModelConfig model_config = read_agreed(world.comm(), [&] { return cli::model_config(c); });
	const int eval_every = read_agreed(world.comm(), [&] { return eval_every_of(c); });
	RunFingerprint fields = program_fields(world, c, model_config, eval_every);
	const Topology topology(world.comm(), ranks_per_node_setting(c.ranks_per_node));
	const Device device = assign_device(topology, probe_gpu_runtime(), parse_device_preference(c.device));
	if (c.threads)
		set_cpu_threads(*c.threads);
	TrainerConfig config = read_agreed(world.comm(), [&] { return trainer_config(c, model_config, topology, device); });
	config.program_fields = std::move(fields);
	const auto model = make_model(model_config, device);
	if (model_config.name == "gpt") {
		const TextWindows train =
			load_text_windows_agreed(world.comm(), c.data_dir, TextSplit::train, model_config.context, config.batch);
		const TextWindows test =
			load_text_windows_agreed(world.comm(), c.data_dir, TextSplit::validation, model_config.context, 1);
		config.tokens_per_sample = model_config.context;
		return train_on(world, c, topology, device, *model, train, test, config);
	}
	const Dataset train = load_fashion_mnist_agreed(world.comm(), c.data_dir, Split::train);
	const Dataset test = config.eval_every > 0 ? load_fashion_mnist_agreed(world.comm(), c.data_dir, Split::test) : Dataset{};
	return train_on(world, c, topology, device, *model, train, test, config);
}

} // namespace

Command add_train_command(CLI::App& parent)
{
	auto config = std::make_shared<TrainConfig>();
	CLI::App* app = parent.add_subcommand("train", "Train a model (an image classifier on Fashion-MNIST, or a GPT on "
						       "text) across the ranks of the job");
	// The tables' rows first, in their order: the model, the optimizer and schedule, the loop,
	// the strategy, checkpoints; then the command's own.
	add_field_options(*app, model_fields(), ModelConfig{}, config->given);
	add_field_options(*app, trainer_fields(), TrainerConfig{}, config->given);
	add_command_options(*app, *config);
	return {app, [config, app](World& world) {
		config->resume = app->count("--resume") > 0;
		if (app->count("--data") == 0) {
			const auto model = config->given.find("model");
			config->data_dir = model != config->given.end() && model->second == "gpt" ? default_text_dir()
												   : default_fashion_mnist_dir();
		}
		return run_training(world, *config);
	}};
}

} // namespace tower::cli
