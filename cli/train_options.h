// Turns `tower train`'s parsed flags into the library's trainer configuration.
#pragma once

#include "cli/train_config.h"
#include "runtime/base/device.h"
#include "runtime/trainer.h"

namespace tower::cli {

// Throws tower::AgreedError naming the flag for a value that does not parse or does not apply
// to the chosen strategy (every rank parses the same command line).
TrainerConfig trainer_config(const TrainConfig& c, int world_size, const Device& device);

} // namespace tower::cli
