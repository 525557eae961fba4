// What a resumed `tower train` must share with the run that wrote its checkpoint.
#pragma once

#include <nlohmann/json.hpp>

#include "models/model_factory.h"
#include "runtime/training/trainer.h"

namespace tower::cli {

// The fields of the model's and the trainer's tables that may not change on resume, by id, as
// text (docs/checkpoints.md lists those that may). Checkpoints store it; resume compares it.
nlohmann::json run_identity(const ModelConfig& model, const TrainerConfig& trainer);

// A checkpoint's saved identity keyed by field id: a manifest written before the option tables,
// keyed by tower train's flags ("--lr") with values as typed, is read through the rows (so
// "dynamic:log2" becomes "dynamic"); a newer one is returned as it is.
nlohmann::json identity_by_id(const nlohmann::json& saved);

// A checkpoint's saved identity in the form run_identity() gives, limited to the fields `now`
// holds (a row since marked may-change is no longer compared). Manifests written before the
// option tables keyed it by tower train's flags ("--lr") with values as typed: those are read by
// the rows (so "dynamic:log2" meets "dynamic"), and the fields they did not hold are taken from
// `now` (they were not compared then).
nlohmann::json read_identity(const nlohmann::json& saved, const nlohmann::json& now);

} // namespace tower::cli
