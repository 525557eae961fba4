// The option tables of the optimizer, the schedule, the trainer and the built-in models.
#include "runtime/options/run_fields.h"

#include "base/error.h"
#include "runtime/options/field_codecs.h"

namespace tower {

namespace {

template <typename C> Field<C> may_change(Field<C> f)
{
	f.may_change_on_resume = true;
	return f;
}

// Compared across ranks as whether it is given, not as its value (a path each node may mount
// elsewhere).
Field<TrainerConfig> path_row(std::string id, std::string help, FieldAccess<TrainerConfig, std::string> access)
{
	Field<TrainerConfig> f = custom_field<TrainerConfig, std::string>(
		std::move(id), std::move(help), access, [](const std::string& t) { return t; },
		[](const std::string& v) { return v; }, [](const std::string& v) { return v.empty() ? std::string("x") : ""; });
	f.agreed = [access](const TrainerConfig& c) {
		return std::string(access(const_cast<TrainerConfig&>(c)).empty() ? "no" : "yes");
	};
	f.may_change_on_resume = true;
	return f;
}

template <typename T> FieldAccess<TrainerConfig, T> of(T TrainerConfig::*member)
{
	return [member](TrainerConfig& c) -> T& { return c.*member; };
}

template <typename T> FieldAccess<TrainerConfig, T> of_checkpoint(T CheckpointConfig::*member)
{
	return [member](TrainerConfig& c) -> T& { return c.checkpoint.*member; };
}

std::vector<Field<TrainerConfig>> loop_rows()
{
	using F = FieldRange;
	Field<TrainerConfig> data_seed = number_field<TrainerConfig, uint64_t>("data_seed", "The order of the training "
									       "samples", of(&TrainerConfig::data_seed));
	data_seed.front_end = false; // tower train orders its data by the model's --seed
	data_seed.may_change_on_resume = true;
	Field<TrainerConfig> tokens = number_field<TrainerConfig, int64_t>("tokens_per_sample", "Language models: the "
		"tokens each sample predicts", of(&TrainerConfig::tokens_per_sample), F::non_negative);
	tokens.front_end = false;          // the program knows it from its model
	tokens.may_change_on_resume = true; // it changes what is reported, not what is computed
	return {
		may_change(number_field<TrainerConfig, int>("epochs", "Passes over the training set", of(&TrainerConfig::epochs),
							    F::positive)),
		number_field<TrainerConfig, int64_t>("batch", "Samples per rank per step (the global batch is this times the "
						     "ranks)", of(&TrainerConfig::batch), F::positive),
		number_field<TrainerConfig, int>("accumulate", "Micro-batches summed locally per update",
						 of(&TrainerConfig::accumulate), F::positive),
		may_change(number_field<TrainerConfig, int64_t>("max_steps", "Stop after this many steps (0: run every epoch)",
								of(&TrainerConfig::max_steps), F::non_negative)),
		data_seed,
		tokens,
		may_change(number_field<TrainerConfig, int64_t>("log_every", "Log a step line every K steps",
								of(&TrainerConfig::log_every), F::positive)),
		may_change(number_field<TrainerConfig, int>("eval_every", "Evaluate every E epochs and at the end (0: never)",
							    of(&TrainerConfig::eval_every), F::non_negative)),
		may_change(number_field<TrainerConfig, int64_t>("check_every", "Compare parameter hashes across ranks every K "
								"steps", of(&TrainerConfig::check_every), F::non_negative)),
		path_row("timeline", "Write a Chrome trace of every rank's steps to this file (Perfetto, chrome://tracing)",
			 of(&TrainerConfig::timeline_path)),
	};
}

std::vector<Field<TrainerConfig>> checkpoint_rows()
{
	Field<TrainerConfig> resume = bool_field<TrainerConfig>("resume", "Start from a checkpoint",
								of_checkpoint(&CheckpointConfig::resume));
	resume.front_end = false; // tower train's --resume [PATH] sets it and resume_path together
	resume.may_change_on_resume = true;
	Field<TrainerConfig> resume_path = path_row("resume_path", "The checkpoint to start from: a step directory, or a "
						    "directory of them", of_checkpoint(&CheckpointConfig::resume_path));
	resume_path.front_end = false;
	resume_path.must_agree = false; // resume checks the files' own identity
	return {
		path_row("checkpoint_dir", "Write checkpoints into this directory (docs/checkpoints.md)",
			 of_checkpoint(&CheckpointConfig::dir)),
		may_change(number_field<TrainerConfig, int64_t>("checkpoint_every", "A checkpoint every K steps, and one at "
				"the end", of_checkpoint(&CheckpointConfig::every), FieldRange::non_negative)),
		may_change(number_field<TrainerConfig, int>("keep_checkpoints", "Complete checkpoints to keep",
							     of_checkpoint(&CheckpointConfig::keep), FieldRange::positive)),
		resume,
		resume_path,
	};
}

template <typename T> FieldAccess<ModelConfig, T> of_model(T ModelConfig::*member)
{
	return [member](ModelConfig& c) -> T& { return c.*member; };
}

Field<ModelConfig> gpt_only(Field<ModelConfig> f)
{
	f.applies = [](const ModelConfig& m) { return m.name == "gpt"; };
	return f;
}

// Checkpoints written before this row existed keep resuming: the state is the same either way.
Field<OptimizerConfig> pytorch_adam_row(FieldAccess<OptimizerConfig, bool> access)
{
	Field<OptimizerConfig> f = bool_field<OptimizerConfig>(
		"pytorch_adam", "adam, adamw: PyTorch's arithmetic, epsilon added after the bias correction", access, true);
	f.may_change_on_resume = true;
	return f;
}

} // namespace

DType parse_compute_type(const std::string& id, const std::string& text)
{
	if (text == "fp32" || text == "f32")
		return DType::f32;
	if (text == "fp16" || text == "f16")
		return DType::f16;
	if (text == "bf16")
		return DType::bf16;
	throw AgreedError(fmt::format("`{}` '{}': unknown type; give fp32, fp16 or bf16", id, text));
}

DType parse_precision(const std::string& text)
{
	return parse_compute_type("precision", text);
}

std::string precision_text(DType compute_type)
{
	switch (compute_type) {
	case DType::f16: return "fp16";
	case DType::bf16: return "bf16";
	default: return "fp32";
	}
}

const std::vector<Field<OptimizerConfig>>& optimizer_fields()
{
	using O = OptimizerConfig;
	auto of = [](auto member) { return [member](O& o) -> auto& { return o.*member; }; };
	static const std::vector<Field<O>> table = {
		choice_field<O>("optimizer", "sgd, momentum, adam or adamw (none: another framework applies the update)",
				of(&O::name), {"sgd", "momentum", "adam", "adamw", "none"}),
		number_field<O, float>("momentum", "Momentum coefficient (momentum)", of(&O::momentum)),
		bool_field<O>("nesterov", "Nesterov momentum", of(&O::nesterov), true),
		number_field<O, float>("beta1", "adam, adamw: decay of the first moment", of(&O::beta1)),
		number_field<O, float>("beta2", "adam, adamw: decay of the second moment", of(&O::beta2)),
		number_field<O, float>("epsilon", "adam, adamw: added to the second moment's root", of(&O::epsilon),
				       FieldRange::positive),
		number_field<O, float>("weight_decay", "L2 (sgd, momentum, adam) or decoupled (adamw)", of(&O::weight_decay)),
		pytorch_adam_row(of(&O::pytorch_adam)),
	};
	return table;
}

const std::vector<Field<ScheduleConfig>>& schedule_fields()
{
	using S = ScheduleConfig;
	auto of = [](auto member) { return [member](S& s) -> auto& { return s.*member; }; };
	static const std::vector<Field<S>> table = {
		choice_field<S>("schedule", "Learning-rate schedule: constant, step or warmup_cosine", of(&S::name),
				{"constant", "step", "warmup_cosine"}),
		number_field<S, float>("lr", "Learning rate", of(&S::base_lr), FieldRange::positive),
		number_field<S, int64_t>("warmup_steps", "Linear warm-up steps (warmup_cosine)", of(&S::warmup_steps),
					 FieldRange::non_negative),
		number_field<S, int64_t>("step_size", "Steps between decays (step)", of(&S::step_size), FieldRange::positive),
		number_field<S, float>("gamma", "Decay factor (step)", of(&S::gamma)),
		number_field<S, int64_t>("total_steps", "warmup_cosine: the step where the cosine reaches min_lr (0: the "
					 "run's planned steps)", of(&S::total_steps), FieldRange::non_negative),
		number_field<S, float>("min_lr", "warmup_cosine: the learning rate the cosine ends at", of(&S::min_lr)),
	};
	return table;
}

const std::vector<Field<TrainerConfig>>& trainer_fields()
{
	static const std::vector<Field<TrainerConfig>> table = [] {
		std::vector<Field<TrainerConfig>> t;
		for (auto& part : {nested_fields(optimizer_fields(), &TrainerConfig::optimizer),
				   nested_fields(schedule_fields(), &TrainerConfig::schedule), loop_rows(),
				   nested_fields(strategy_fields(), &TrainerConfig::strategy), checkpoint_rows()})
			t.insert(t.end(), part.begin(), part.end());
		return t;
	}();
	return table;
}

const std::vector<Field<ModelConfig>>& model_fields()
{
	using F = FieldRange;
	static const std::vector<Field<ModelConfig>> table = [] {
		Field<ModelConfig> seed = number_field<ModelConfig, uint64_t>("seed", "Seed of the initial parameters and the "
									      "data order", of_model(&ModelConfig::seed));
		seed.front_end_default = "42";
		return std::vector<Field<ModelConfig>>{
			choice_field<ModelConfig>("model", "Model: mlp or cnn (Fashion-MNIST), or gpt (byte-level text)",
						  of_model(&ModelConfig::name), {"mlp", "cnn", "gpt"}),
			number_field<ModelConfig, int64_t>("hidden", "Hidden width (mlp default 1024, cnn 512)",
							   of_model(&ModelConfig::hidden), F::non_negative),
			number_field<ModelConfig, int64_t>("depth", "Hidden layers of the mlp", of_model(&ModelConfig::depth),
							   F::positive),
			gpt_only(number_field<ModelConfig, int64_t>("layers", "gpt: transformer blocks",
								    of_model(&ModelConfig::layers), F::positive)),
			gpt_only(number_field<ModelConfig, int64_t>("width", "gpt: residual width", of_model(&ModelConfig::width),
								    F::positive)),
			gpt_only(number_field<ModelConfig, int64_t>("heads", "gpt: attention heads (must divide width)",
								    of_model(&ModelConfig::heads), F::positive)),
			gpt_only(number_field<ModelConfig, int64_t>("context", "gpt: positions per window (bytes of text seen "
								    "at once)", of_model(&ModelConfig::context), F::positive)),
			seed,
			custom_field<ModelConfig, DType>("precision", "Activations and gradients in fp32, fp16 or bf16 (master "
				"weights stay f32)", of_model(&ModelConfig::precision), parse_precision, precision_text,
				[](const DType& d) { return d == DType::f32 ? DType::bf16 : DType::f32; }),
		};
	}();
	return table;
}

} // namespace tower
