// The option tables of a training run, one per configuration: the optimizer's, the schedule's,
// the strategy's, the trainer's (which holds those three, its checkpoints and its own), and the
// built-in models'. A new option is one row: front ends derive their flags and keywords from the
// rows, and the run's agreement, its checkpoints' identity and its resume rules are derived too.
#pragma once

#include <vector>

#include "models/model_factory.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "runtime/options/field.h"
#include "runtime/strategies/strategy_options.h"
#include "runtime/training/trainer.h"

namespace tower {

const std::vector<Field<OptimizerConfig>>& optimizer_fields();
const std::vector<Field<ScheduleConfig>>& schedule_fields();
const std::vector<Field<StrategyOptions>>& strategy_fields();
const std::vector<Field<TrainerConfig>>& trainer_fields();
const std::vector<Field<ModelConfig>>& model_fields();

// The text forms of the values some rows hold, for front ends that show or take them.
std::string groups_text(const GroupAssignment& groups); // "0,1;2,3"; "" for none
GroupAssignment parse_groups(const std::string& text);  // throws tower::AgreedError naming `groups`
std::string precision_text(DType compute_type);          // fp32, fp16, bf16
// "fp32" (or "f32"), "fp16" (or "f16"), "bf16"; throws tower::AgreedError naming the field `id`.
DType parse_compute_type(const std::string& id, const std::string& text);
DType parse_precision(const std::string& text); // the model's `precision`

} // namespace tower
