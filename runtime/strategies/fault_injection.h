// Faults tower's own tests and demos put into a run on purpose: not part of the installed interface.
#pragma once

#include <cstdint>

#include "runtime/strategies/strategy_options.h"

namespace tower {

struct FaultInjection {
	// A NaN in one rank's gradient at this step (0-based); -1: none.
	int64_t nonfinite_step = -1;
	int nonfinite_rank = 0;
	// A straggler: this rank sleeps delay_ms in every step before it sends its gradient; -1: none.
	int delay_rank = -1;
	double delay_ms = 0;
	// Replicated: run the collective (and, compressed, its casts) even in a replica group of one,
	// where it changes nothing but the compression's rounding, so that a one-GPU machine drives
	// the NCCL path, compression and overlap ordering that two GPUs would.
	bool reduce_alone = false;
};

// The faults `options` carries; none when it carries none.
inline const FaultInjection& faults_of(const StrategyOptions& options)
{
	static const FaultInjection none;
	return options.faults ? *options.faults : none;
}

// A copy of `options` whose faults `change` edits.
template <typename Change>
void edit_faults(StrategyOptions& options, Change change)
{
	FaultInjection f = faults_of(options);
	change(f);
	options.faults = std::make_shared<const FaultInjection>(f);
}

} // namespace tower
