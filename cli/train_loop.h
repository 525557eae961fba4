// The training run behind `tower train`: data, model, builder, the step loop, logs and summary.
#pragma once

#include "cli/train_config.h"
#include "runtime/base/world.h"

namespace tower::cli {

int run_training(World& world, const TrainConfig& config);

} // namespace tower::cli
