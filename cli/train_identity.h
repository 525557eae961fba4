// What a resumed `tower train` must share with the run that wrote its checkpoint.
#pragma once

#include <nlohmann/json.hpp>

#include "cli/train_config.h"

namespace tower::cli {

// The options as JSON keyed by flag name, less those a resumed run may change (listed in
// train_identity.cpp and docs/checkpoints.md). Checkpoints store it; resume compares it.
nlohmann::json run_identity(const TrainConfig& c);

} // namespace tower::cli
