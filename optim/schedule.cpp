// Learning-rate schedules: constant, step decay, and linear warm-up followed by cosine decay.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/error.h"

namespace tower {

float LrSchedule::lr(int64_t step) const
{
	switch (kind_) {
	case ScheduleKind::constant: return config_.base_lr;
	case ScheduleKind::step:
		return static_cast<float>(config_.base_lr *
					  std::pow(static_cast<double>(config_.gamma), static_cast<double>(step / config_.step_size)));
	case ScheduleKind::warmup_cosine: return warmup_cosine(step);
	}
	return config_.base_lr;
}

// Step s < warmup gets base * (s + 1) / warmup, so the first step is not wasted at 0; after
// that the rate follows half a cosine from base_lr down to min_lr at total_steps and stays there.
float LrSchedule::warmup_cosine(int64_t step) const
{
	const ScheduleConfig& c = config_;
	if (step < c.warmup_steps)
		return static_cast<float>(c.base_lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps));
	const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) /
						      static_cast<double>(c.total_steps - c.warmup_steps));
	const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
	return static_cast<float>(c.min_lr + (static_cast<double>(c.base_lr) - c.min_lr) * cosine);
}

std::vector<std::string> schedule_names()
{
	return {"constant", "step", "warmup_cosine"};
}

namespace {

void require(bool ok, const std::string& what)
{
	if (!ok)
		throw AgreedError(what);
}

ScheduleKind schedule_kind(const std::string& name)
{
	if (name == "constant")
		return ScheduleKind::constant;
	if (name == "step")
		return ScheduleKind::step;
	if (name == "warmup_cosine")
		return ScheduleKind::warmup_cosine;
	throw AgreedError(fmt::format("unknown learning-rate schedule '{}'; valid schedules: {}", name,
				      fmt::join(schedule_names(), ", ")));
}

} // namespace

LrSchedule make_schedule(const ScheduleConfig& config)
{
	const ScheduleKind kind = schedule_kind(config.name);
	require(config.base_lr > 0.0f, fmt::format("learning rate {} must be positive", config.base_lr));
	if (kind == ScheduleKind::step) {
		require(config.step_size > 0, fmt::format("step schedule: step size {} must be positive", config.step_size));
		require(config.gamma > 0.0f && config.gamma <= 1.0f,
			fmt::format("step schedule: gamma {} must be in (0, 1]", config.gamma));
	}
	if (kind == ScheduleKind::warmup_cosine) {
		require(config.warmup_steps >= 0,
			fmt::format("warmup_cosine schedule: warm-up steps {} must not be negative", config.warmup_steps));
		require(config.total_steps > config.warmup_steps,
			fmt::format("warmup_cosine schedule: total steps {} must exceed the {} warm-up steps",
				    config.total_steps, config.warmup_steps));
		require(config.min_lr >= 0.0f && config.min_lr <= config.base_lr,
			fmt::format("warmup_cosine schedule: min_lr {} must be in [0, base_lr {}]", config.min_lr,
				    config.base_lr));
	}
	return LrSchedule(kind, config);
}

} // namespace tower
