// Turns `tower train`'s parsed flags into the library's trainer configuration.
#pragma once

#include "cli/train_config.h"
#include "base/device/device.h"
#include "runtime/training/trainer.h"

namespace tower::cli {

// Throws tower::AgreedError naming the flag for a value that does not parse or does not apply
// to the chosen strategy (every rank parses the same command line).
TrainerConfig trainer_config(const TrainConfig& c, const Topology& topology, const Device& device);

// True when `tower elastic` started this run: its rank 0 then prints the launcher's lines.
bool under_elastic_launcher();

// --groups "0,1;2,3" -> {{0, 1}, {2, 3}} ("" -> no groups); throws tower::AgreedError for a member
// that is not a rank number. Whether the groups fit the job is validate_group_assignment's call.
GroupAssignment parse_groups(const std::string& text);

// --inject-nonfinite "STEP[:RANK]" (STEP from 1, RANK 0 by default) into o's injection fields;
// throws tower::AgreedError unless STEP >= 1 and RANK < world_size.
void parse_injection(const std::string& text, int world_size, GradientOptions* o);
// --inject-delay "RANK:MS": that rank sleeps MS ms in every step (stragglers for tests and benchmarks).
void parse_delay(const std::string& text, int world_size, StrategyOptions* o);

} // namespace tower::cli
