// `tower train`: the command line of training a built-in model (the classifiers on Fashion-MNIST, the GPT
// on text); the library's trainer does the run.
#include <memory>

#include "cli/command.h"
#include "cli/train_config.h"
#include "cli/train_options.h"
#include "cli/train_report.h"
#include "models/kernels/cpu/cpu_threads.h"
#include "data/fashion_mnist.h"
#include "data/text_corpus.h"
#include "models/model_factory.h"
#include "base/watchdog/collective_debug.h"
#include "base/watchdog/watched_wait.h"
#include "runtime/training/trainer.h"

namespace tower::cli {

namespace {

void add_model_options(CLI::App& app, TrainConfig& c)
{
	app.add_option("--model", c.model.name, "Model: mlp or cnn (Fashion-MNIST), or gpt (byte-level text)")
		->check(CLI::IsMember({"mlp", "cnn", "gpt"}));
	app.add_option("--hidden", c.model.hidden, "Hidden width (mlp default 1024, cnn 512)")->check(CLI::NonNegativeNumber);
	app.add_option("--depth", c.model.depth, "Hidden layers of the mlp")->check(CLI::PositiveNumber);
	app.add_option("--layers", c.model.layers, "gpt: transformer blocks")->check(CLI::PositiveNumber);
	app.add_option("--width", c.model.width, "gpt: residual width")->check(CLI::PositiveNumber);
	app.add_option("--heads", c.model.heads, "gpt: attention heads (must divide --width)")->check(CLI::PositiveNumber);
	app.add_option("--context", c.model.context, "gpt: positions per window (bytes of text seen at once)")
		->check(CLI::PositiveNumber);
	app.add_option("--seed", c.model.seed, "Seed of the initial parameters and the data order");
	app.add_option("--data", c.data_dir,
		       "mlp, cnn: directory of the Fashion-MNIST *-ubyte.gz files; gpt: a text file or directory "
		       "(default: Debian's fortunes, " + default_text_dir() + ")");
}

void add_optimizer_options(CLI::App& app, TrainConfig& c)
{
	// The library's "none" leaves the update to a framework (the PyTorch front end): not a trainer's.
	app.add_option("--optimizer", c.optimizer.name, "sgd, momentum, adam or adamw")->check([](const std::string& v) {
		return v == "none" ? std::string("'none' leaves the update to another framework (tower.torch); tower train "
						 "needs sgd, momentum, adam or adamw")
				   : std::string();
	});
	app.add_option("--lr", c.schedule.base_lr, "Learning rate")->check(CLI::PositiveNumber);
	app.add_option("--momentum", c.optimizer.momentum, "Momentum coefficient (momentum)");
	app.add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum");
	app.add_option("--weight-decay", c.optimizer.weight_decay, "L2 (sgd, momentum, adam) or decoupled (adamw)");
	app.add_option("--schedule", c.schedule.name, "Learning-rate schedule: constant, step or warmup_cosine");
	app.add_option("--warmup-steps", c.schedule.warmup_steps, "Linear warm-up steps (warmup_cosine)");
	app.add_option("--step-size", c.schedule.step_size, "Steps between decays (step)");
	app.add_option("--gamma", c.schedule.gamma, "Decay factor (step)");
}

void add_run_options(CLI::App& app, TrainConfig& c)
{
	app.add_option("--epochs", c.epochs, "Passes over the training set")->check(CLI::PositiveNumber);
	app.add_option("--batch", c.batch, "Samples per rank per step (the global batch is this times the ranks)")
		->check(CLI::PositiveNumber);
	app.add_option("--max-steps", c.max_steps, "Stop after this many steps (0: run every epoch)")
		->check(CLI::NonNegativeNumber);
	app.add_option("--allreduce", c.allreduce, "All-reduce mode: ring, hierarchical, naive, or auto (ring with NCCL on GPUs, hierarchical on CPUs)");
	app.add_option("--reduce", c.reduce, "Gradient reduction: mean or sum");
	app.add_option("--groups", c.groups, "Replica groups reducing separately, e.g. '0,1;2,3'");
	app.add_option("--fusion-mb", c.fusion_mb, "Fused bucket size in MiB (0: no fusion)")->check(CLI::NonNegativeNumber);
	app.add_option("--overlap", c.overlap, "All-reduce buckets during backward (true/false)");
	app.add_option("--shard-update", c.shard_update,
		       "Split the optimizer update across ranks sharing a node's memory (CPU, hierarchical; true/false)");
	app.add_option("--device", c.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
	app.add_option("--threads", c.threads,
		       "CPU kernel threads per rank (default 1, or OMP_NUM_THREADS: the ranks fill the cores)")
		->check(CLI::PositiveNumber);
	app.add_option("--ranks-per-node", c.ranks_per_node, "Simulated nodes of this many ranks")->check(CLI::PositiveNumber);
	app.add_option("--metrics", c.metrics_path, "Write JSON lines of metrics to this file (rank 0)");
	app.add_option("--timeline", c.timeline_path,
		       "Write a Chrome trace of every rank's steps to this file (Perfetto, chrome://tracing)");
	app.add_option("--check-every", c.check_every, "Compare parameter hashes across ranks every K steps")
		->check(CLI::NonNegativeNumber);
	app.add_option("--log-every", c.log_every, "Log a step line every K steps")->check(CLI::PositiveNumber);
	app.add_option("--eval-every", c.eval_every, "Evaluate every E epochs and at the end (0: never)")
		->check(CLI::NonNegativeNumber);
	app.add_flag("--deterministic", c.deterministic,
		     "Sum the all-reduce in rank order: every mode and rank layout gives the same bits");
}

void add_checkpoint_options(CLI::App& app, TrainConfig& c)
{
	app.add_option("--checkpoint-dir", c.checkpoint_dir, "Write checkpoints into this directory (docs/checkpoints.md)");
	app.add_option("--checkpoint-every", c.checkpoint_every, "A checkpoint every K steps, and one at the end")
		->check(CLI::NonNegativeNumber);
	app.add_option("--keep-checkpoints", c.keep_checkpoints, "Complete checkpoints to keep")->check(CLI::PositiveNumber);
	app.add_option("--resume", c.resume_path,
		       "Continue from the latest valid checkpoint in --checkpoint-dir, or from PATH")
		->expected(0, 1);
}

void add_precision_options(CLI::App& app, TrainConfig& c)
{
	app.add_option("--precision", c.precision, "Activations and gradients in fp32, fp16 or bf16 (master weights stay f32)");
	app.add_option("--compress", c.compress, "All-reduce the gradients as none (f32), fp16 or bf16");
	app.add_option("--loss-scale", c.loss_scale,
		       "none, static:VALUE, dynamic (log2 policy), dynamic:log2 or dynamic:growth");
	app.add_option("--loss-scale-init", c.loss_scale_init, "log2 policy: initial log2 of the scale");
	app.add_option("--loss-scale-inc", c.loss_scale_inc, "log2 policy: log2 added per clean step");
	app.add_option("--loss-scale-dec", c.loss_scale_dec, "log2 policy: log2 removed per overflow");
	app.add_option("--accumulate", c.accumulate, "Micro-batches summed locally per update")->check(CLI::PositiveNumber);
	app.add_option("--inject-nonfinite", c.inject_nonfinite, "STEP[:RANK]: put a NaN into RANK's gradient at STEP (tests, demos)");
}

void add_strategy_options(CLI::App& app, TrainConfig& c)
{
	app.add_option("--strategy", c.strategy,
		       "How the ranks train together: replicated, parameter-server, async or sync-replicas")
		->check(CLI::IsMember(strategy_names()));
	app.add_option("--ps-ranks", c.ps_ranks,
		       "parameter-server: 0 places the variables on every rank; K > 0 makes ranks 0..K-1 servers only");
	app.add_option("--ema-decay", c.ema_decay,
		       "Keep moving averages of the variables with this decay in [0, 1) and evaluate them too");
	app.add_option("--replicas-to-aggregate", c.replicas_to_aggregate,
		       "sync-replicas: gradients averaged per update (default: one per worker; fewer leaves backup workers)");
	app.add_option("--async-scale", c.async_scale,
		       "async: scale each gradient by 1/workers (true, the default) or apply it as it is (false)");
	app.add_option("--async-staleness", c.async_staleness,
		       "async: none (default) or scale: a gradient s updates late takes at most 1/(s+1) of the rate");
	app.add_option("--max-staleness", c.max_staleness,
		       "async: none (default: workers never wait) or S >= 0: a worker waits for its token while a "
		       "gradient could arrive more than S updates late");
	app.add_option("--inject-delay", c.inject_delay,
		       "RANK:MS: that rank sleeps MS milliseconds in every step before it sends its gradient (tests, demos)");
}

void add_safety_options(CLI::App& app, TrainConfig& c)
{
	app.add_option("--stall-warn", c.stall_warn, "Seconds a rank waits for the others before it names who has not arrived")
		->check(CLI::NonNegativeNumber);
	app.add_option("--stall-abort", c.stall_abort, "Seconds a rank waits before it aborts the job (0: never)")
		->check(CLI::NonNegativeNumber);
	app.add_flag("--debug-collectives", c.debug_collectives,
		     "Before each collective, compare what every rank calls (also TOWER_DEBUG=collectives)");
}

// The options that configure the replicated strategy's all-reduce; other strategies refuse them.
const char* const replicated_only[] = {"--allreduce", "--fusion-mb", "--overlap", "--shard-update", "--groups",
				       "--deterministic"};

int run_training(World& world, const TrainConfig& c)
{
	set_stall_limits({c.stall_warn, c.stall_abort});
	if (c.debug_collectives)
		set_collective_debug(true);
	// What this command line decides before the trainer sees it (the topology, which data is
	// loaded, the model) is compared first; the trainer compares the rest, data included.
	RunFingerprint program_fields;
	program_fields.add("--model", c.model.name);
	program_fields.add("--hidden", c.model.hidden);
	program_fields.add("--depth", c.model.depth);
	if (c.model.name == "gpt") {
		program_fields.add("--layers", c.model.layers);
		program_fields.add("--width", c.model.width);
		program_fields.add("--heads", c.model.heads);
		program_fields.add("--context", c.model.context);
	}
	program_fields.add("--seed", c.model.seed);
	program_fields.add("--precision", c.precision);
	program_fields.add("--ranks-per-node", c.ranks_per_node ? std::to_string(*c.ranks_per_node) : "none");
	program_fields.add("--eval-every", c.eval_every);
	describe_build(program_fields);
	check_run_agreement(world.comm(), program_fields);
	const Topology topology(world.comm(), ranks_per_node_setting(c.ranks_per_node));
	const Device device = assign_device(topology, probe_gpu_runtime(), parse_device_preference(c.device));
	if (c.threads)
		set_cpu_threads(*c.threads);
	TrainerConfig config = trainer_config(c, topology, device);
	config.program_fields = program_fields;
	ModelConfig model_config = c.model;
	model_config.precision = parse_precision(c.precision);
	const auto model = make_model(model_config, device);
	if (c.model.name == "gpt") {
		const TextWindows train =
			load_text_windows_agreed(world.comm(), c.data_dir, TextSplit::train, c.model.context, c.batch);
		const TextWindows test =
			load_text_windows_agreed(world.comm(), c.data_dir, TextSplit::validation, c.model.context, 1);
		config.tokens_per_sample = c.model.context;
		TrainReport report(world.comm(), c.metrics_path, under_elastic_launcher());
		Trainer trainer(topology, device, *model, train, test, config, &report);
		trainer.run();
		return 0;
	}
	const Dataset train = load_fashion_mnist_agreed(world.comm(), c.data_dir, Split::train);
	const Dataset test = c.eval_every > 0 ? load_fashion_mnist_agreed(world.comm(), c.data_dir, Split::test) : Dataset{};
	TrainReport report(world.comm(), c.metrics_path, under_elastic_launcher());
	Trainer trainer(topology, device, *model, train, test, config, &report);
	trainer.run();
	return 0;
}

} // namespace

Command add_train_command(CLI::App& parent)
{
	auto config = std::make_shared<TrainConfig>();
	config->data_dir = default_fashion_mnist_dir();
	config->model.seed = 42;
	CLI::App* app = parent.add_subcommand("train", "Train a model (an image classifier on Fashion-MNIST, or a GPT on "
						       "text) across the ranks of the job");
	add_model_options(*app, *config);
	add_optimizer_options(*app, *config);
	add_run_options(*app, *config);
	add_precision_options(*app, *config);
	add_strategy_options(*app, *config);
	add_checkpoint_options(*app, *config);
	add_safety_options(*app, *config);
	return {app, [config, app](World& world) {
		config->resume = app->count("--resume") > 0;
		if (config->model.name == "gpt" && app->count("--data") == 0)
			config->data_dir = default_text_dir();
		for (const char* name : replicated_only)
			if (app->count(name) > 0)
				config->replicated_only_given.push_back(name);
		return run_training(world, *config);
	}};
}

} // namespace tower::cli
