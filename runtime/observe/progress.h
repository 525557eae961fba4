// Rank 0's view of a training run: a live line on a terminal, plain periodic lines otherwise.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace tower {

struct ProgressState {
	int epoch = 0; // 1-based
	int epochs = 0;
	int64_t step = 0; // global step, 1-based
	int64_t steps = 0; // total steps of the run
	float loss = 0.0f;
	double samples_per_s = 0.0;
	double eta_s = 0.0;
	std::string extra; // appended as is (e.g. "lr 0.05")
};

class Progress {
public:
	// `enabled` is true on rank 0 only; `live` redraws one line in place (a terminal).
	Progress(bool enabled, bool live);
	void update(const ProgressState& state);
	// Prints a line that stays (evaluation results, the summary), ending any live line first.
	void say(const std::string& line);

private:
	bool enabled_;
	bool live_;
	bool line_open_ = false;
	std::mutex mutex_; // the detached strategies' owner thread and checkpoint writer print too
};

// True when standard output is a terminal.
bool stdout_is_terminal();

} // namespace tower
