// Learning-rate schedules: constant, step decay, and linear warm-up followed by cosine decay.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tower {

struct ScheduleConfig {
	std::string name = "constant"; // constant | step | warmup_cosine
	float base_lr = 0.05f;
	int64_t step_size = 1000;      // step: multiply by gamma every step_size steps
	float gamma = 0.1f;            // step
	int64_t warmup_steps = 0;      // warmup_cosine: linear ramp to base_lr over these steps
	int64_t total_steps = 0;       // warmup_cosine: the cosine reaches min_lr here
	float min_lr = 0.0f;           // warmup_cosine
};

enum class ScheduleKind { constant, step, warmup_cosine };

class LrSchedule {
public:
	// Use make_schedule, which checks the configuration.
	LrSchedule(ScheduleKind kind, const ScheduleConfig& config) : kind_(kind), config_(config) {}

	// The learning rate of `step`, counted from 0.
	float lr(int64_t step) const;

private:
	float warmup_cosine(int64_t step) const;

	ScheduleKind kind_;
	ScheduleConfig config_;
};

std::vector<std::string> schedule_names();

// Unknown names and inconsistent settings throw tower::AgreedError.
LrSchedule make_schedule(const ScheduleConfig& config);

} // namespace tower
