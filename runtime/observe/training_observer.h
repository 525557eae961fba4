// What a training run tells the program that drives it: where it starts, each update it completes,
// its progress, its lines for people, its metrics lines and its summary.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/observe/progress.h"

namespace tower {

// The trainer calls an observer on rank 0 only, so a program prints and writes files once. Calls
// come from the trainer's thread, with two exceptions an observer must allow for: said() may come
// from the checkpoint writer's thread at any time, and under async and sync-replicas stepped(),
// progressed() and recorded() come from rank 0's owner thread while the trainer's thread trains.
class TrainingObserver {
public:
	virtual ~TrainingObserver() = default;
	// Before the first update: at step 0, or after the checkpoint of `step` was restored.
	virtual void started(int64_t step, bool resumed) { (void)step, (void)resumed; }
	// An update completed (lock-step strategies) or applied by the chief (async, sync-replicas).
	virtual void stepped(int64_t step) { (void)step; }
	// The state at the end of a logging window.
	virtual void progressed(const ProgressState& state) { (void)state; }
	// A line for people: the run's plan, evaluations, checkpoints, the final tally.
	virtual void said(const std::string& line) { (void)line; }
	// A line of metrics: "step" (a logging window), "eval", "checkpoint" and "placement" events.
	virtual void recorded(const nlohmann::json& line) { (void)line; }
	// The run's summary (event "summary"), once, after its last update and evaluation.
	virtual void finished(const nlohmann::json& summary) { (void)summary; }
};

} // namespace tower
