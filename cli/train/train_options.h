// Turns `tower train`'s parsed options into the library's model and trainer configurations.
#pragma once

#include "base/device/device.h"
#include "cli/train/train_config.h"
#include "models/model_factory.h"
#include "runtime/training/trainer.h"

namespace tower::cli {

// The model's table applied (--seed 42 unless given). Throws tower::AgreedError naming the
// field for a value that does not parse (every rank parses the same command line).
ModelConfig model_config(const TrainConfig& c);

// The trainer's table applied (--allreduce auto picks by device and topology), its checkpoints'
// identity, and the labels of its summary. Throws tower::AgreedError naming the field for a value
// that does not parse or that the chosen strategy does not read.
TrainerConfig trainer_config(const TrainConfig& c, const ModelConfig& model, const Topology& topology,
			     const Device& device);

} // namespace tower::cli
