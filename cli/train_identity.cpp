// What a resumed `tower train` must share with the run that wrote its checkpoint.
#include "cli/train_identity.h"

#include <fmt/format.h>

namespace tower::cli {

namespace {

// The one list of options a resumed run may change: how long it runs, where files are, what it
// logs, and how the ranks share the work (a checkpoint holds every variable by its place in the
// whole, so any strategy at any world size can load it). Everything else changes what is
// computed and must match.
const char* const may_change_on_resume[] = {
	"--epochs", "--max-steps", "--data", "--metrics", "--log-every", "--eval-every", "--check-every",
	"--checkpoint-dir", "--checkpoint-every", "--keep-checkpoints", "--resume", "--device",
	"--strategy", "--ps-ranks", "--allreduce", "--fusion-mb", "--overlap", "--shard-update",
	"--ranks-per-node", "--deterministic",
};

// A float as the shortest decimal that reads back as it, so differences print as typed.
nlohmann::json number(float v)
{
	return nlohmann::json::parse(fmt::format("{}", v));
}

template <typename T> nlohmann::json optional_json(const std::optional<T>& v)
{
	return v ? nlohmann::json(*v) : nlohmann::json();
}

} // namespace

nlohmann::json run_identity(const TrainConfig& c)
{
	nlohmann::json j = {
		{"--model", c.model.name},
		{"--hidden", c.model.hidden},
		{"--depth", c.model.depth},
		{"--seed", c.model.seed},
		{"--data", c.data_dir},
		{"--optimizer", c.optimizer.name},
		{"--momentum", number(c.optimizer.momentum)},
		{"--nesterov", c.optimizer.nesterov},
		{"--weight-decay", number(c.optimizer.weight_decay)},
		{"--lr", number(c.schedule.base_lr)},
		{"--schedule", c.schedule.name},
		{"--warmup-steps", c.schedule.warmup_steps},
		{"--step-size", c.schedule.step_size},
		{"--gamma", number(c.schedule.gamma)},
		{"--epochs", c.epochs},
		{"--batch", c.batch},
		{"--max-steps", c.max_steps},
		{"--allreduce", c.allreduce},
		{"--reduce", c.reduce},
		{"--groups", c.groups},
		{"--fusion-mb", c.fusion_mb},
		{"--overlap", c.overlap},
		{"--shard-update", c.shard_update},
		{"--device", c.device},
		{"--ranks-per-node", optional_json(c.ranks_per_node)},
		{"--metrics", c.metrics_path},
		{"--check-every", c.check_every},
		{"--log-every", c.log_every},
		{"--eval-every", c.eval_every},
		{"--precision", c.precision},
		{"--compress", c.compress},
		{"--loss-scale", c.loss_scale},
		{"--loss-scale-init", c.loss_scale_init},
		{"--loss-scale-inc", c.loss_scale_inc},
		{"--loss-scale-dec", c.loss_scale_dec},
		{"--accumulate", c.accumulate},
		{"--inject-nonfinite", c.inject_nonfinite},
		{"--strategy", c.strategy},
		{"--ps-ranks", c.ps_ranks},
		{"--ema-decay", optional_json(c.ema_decay)},
		{"--deterministic", c.deterministic},
	};
	for (const char* name : may_change_on_resume)
		j.erase(name);
	if (c.model.name == "gpt") // only then, so the classifiers' checkpoints keep their identity
		j.update({{"--layers", c.model.layers},
			  {"--width", c.model.width},
			  {"--heads", c.model.heads},
			  {"--context", c.model.context}});
	return j;
}

} // namespace tower::cli
