// What must be equal on every rank of a run, as named fields, and the check that it is.
#include "runtime/safety/run_fingerprint.h"

#include <fmt/ranges.h>

#include "data/sample_set.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "base/watchdog/collective_debug.h"
#include "base/content_hash.h"
#include "base/device/device.h"
#include "runtime/strategies/strategy.h"
#include "tower_config.h"

namespace tower {

namespace {

const char* loss_scale_name(const LossScaleOptions& o)
{
	switch (o.mode) {
	case LossScaleMode::none: return "none";
	case LossScaleMode::fixed: return "static";
	case LossScaleMode::dynamic: return o.policy == LossScalePolicy::growth ? "dynamic:growth" : "dynamic:log2";
	}
	return "unknown";
}

std::string groups_text(const GroupAssignment& groups)
{
	std::vector<std::string> parts;
	for (const auto& g : groups)
		parts.push_back(fmt::format("{}", fmt::join(g, ",")));
	return fmt::format("'{}'", fmt::join(parts, ";"));
}

} // namespace

void describe(RunFingerprint& f, const OptimizerConfig& o)
{
	f.add("--optimizer", o.name);
	f.add("--momentum", o.momentum);
	f.add("--nesterov", o.nesterov);
	f.add("adam beta1", o.beta1);
	f.add("adam beta2", o.beta2);
	f.add("adam epsilon", o.epsilon);
	f.add("--weight-decay", o.weight_decay);
}

void describe(RunFingerprint& f, const ScheduleConfig& s)
{
	f.add("--schedule", s.name);
	f.add("--lr", s.base_lr);
	f.add("--step-size", s.step_size);
	f.add("--gamma", s.gamma);
	f.add("--warmup-steps", s.warmup_steps);
	f.add("schedule total steps", s.total_steps);
	f.add("schedule min lr", s.min_lr);
}

void describe(RunFingerprint& f, const StrategyOptions& s)
{
	const ReplicatedOptions& r = s.replicated;
	const GradientOptions& g = s.gradients;
	f.add("--strategy", s.name);
	f.add("--allreduce", all_reduce_mode_name(r.mode));
	f.add("--reduce", reduce_op_name(g.reduce));
	f.add("--fusion-mb", r.fusion_mb);
	f.add("--overlap", r.overlap);
	f.add("--groups", groups_text(r.groups));
	f.add("all-reduce chunk bytes", r.all_reduce.chunk_bytes);
	f.add("--deterministic", r.all_reduce.deterministic);
	f.add("--compress", dtype_name(g.compress));
	f.add("--loss-scale", loss_scale_name(g.loss_scale));
	f.add("static loss scale", g.loss_scale.fixed_scale);
	f.add("--loss-scale-init", g.loss_scale.log2_init);
	f.add("--loss-scale-inc", g.loss_scale.log2_inc);
	f.add("--loss-scale-dec", g.loss_scale.log2_dec);
	f.add("growth loss scale init", g.loss_scale.growth_log2_init);
	f.add("growth loss scale interval", g.loss_scale.growth_interval);
	f.add("--shard-update", r.shard_update);
	f.add("--inject-nonfinite", fmt::format("{}:{}", g.inject_nonfinite_step + 1, g.inject_nonfinite_rank));
	f.add("--ps-ranks", s.ps_ranks);
	f.add("--ema-decay", s.ema_decay ? fmt::format("{}", *s.ema_decay) : std::string("none"));
	f.add("--replicas-to-aggregate", s.replicas_to_aggregate);
	f.add("--async-scale", s.async_scale);
	f.add("--async-staleness", s.async_staleness_scale ? "scale" : "none");
	f.add("--max-staleness", s.max_staleness >= 0 ? fmt::format("{}", s.max_staleness) : std::string("none"));
	f.add("--inject-delay", fmt::format("{}:{}", s.inject_delay_rank, s.inject_delay_ms));
}

void describe(RunFingerprint& f, Model& model, const Device& device)
{
	describe_parameters(f, model.parameters(), device);
}

void describe_parameters(RunFingerprint& f, const std::vector<Parameter*>& parameters, const Device& device)
{
	std::string signature;
	int64_t elements = 0;
	for (const Parameter* p : parameters) {
		signature += fmt::format("{} {} {};", p->name, dtype_name(p->value.dtype()), shape_text(p->value.shape()));
		elements += p->value.numel();
	}
	f.add("model", fmt::format("{} tensors, {} elements, signature {:016x}", parameters.size(), elements,
				   content_hash(signature.data(), signature.size())));
	f.add("device kind", device.is_cuda() ? "cuda" : "cpu");
}

void describe(RunFingerprint& f, const SampleSet& data, std::string_view split)
{
	f.add(fmt::format("{} data", split), data.describe());
}

void describe_build(RunFingerprint& f)
{
	f.add("tower version", TOWER_VERSION);
	f.add("tower build", fmt::format("cuda {}, compiler {}", TOWER_HAVE_CUDA ? "on" : "off", __VERSION__));
	// Ranks linked against different MPI libraries may not even agree on the wire.
	char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
	int length = 0;
	MPI_Get_library_version(library, &length);
	const std::string text(library, static_cast<size_t>(length));
	f.add("MPI library", text.substr(0, text.find_first_of(",\n")));
	// On for one rank only, the check's messages would meet nothing on the others.
	f.add("--debug-collectives", collective_debug());
}

const std::vector<std::string>& options_that_may_differ()
{
	static const std::vector<std::string> list = {
		"--metrics: only rank 0 writes the metrics file",
		"--timeline PATH: each rank writes its own part; whether a timeline is recorded is compared",
		"--checkpoint-dir DIR, --resume PATH: a shared directory may be mounted elsewhere on each node; "
		"whether checkpoints are written or resumed is compared, and resume checks the files' own identity",
		"--data: the directory may be mounted elsewhere on each node; the data's contents are compared",
		"--device: auto and an explicit choice may pick the same device; the device kind is compared",
		"--stall-warn, --stall-abort: each rank's own patience; no rank waits on another's setting",
		"progress display: rank 0 alone prints, as a live line on a terminal and plain lines otherwise",
		"summary labels (TrainerConfig::labels): written into the summary as they are, computing nothing",
	};
	return list;
}

void check_run_agreement(MPI_Comm comm, const RunFingerprint& mine)
{
	agree_on_fields(comm, mine.fields(),
			"the ranks of this job were started with different options (start every rank with the same "
			"command line and data)");
}

} // namespace tower
