// What an elastic launcher (tower elastic) reads of a run: where it starts and each step it
// completes, one line each on rank 0's stdout.
#pragma once

#include <cstdint>

#include "runtime/observe/training_observer.h"

namespace tower {

// Every launcher line starts with it; the launcher keeps such lines out of the output it passes on.
inline constexpr const char* launcher_line_prefix = "tower-elastic: ";

// Whether this process runs under tower elastic, which sets TOWER_ELASTIC_GENERATION.
bool under_elastic_launcher();

// The observer that prints the lines, under a launcher only (elsewhere it prints nothing):
// "tower-elastic: started" or "tower-elastic: resumed S", then "tower-elastic: step S" after
// every step. tower train's report and tower.torch both use it; call it on one rank only (tower
// train's rank 0, tower.torch's first worker).
class LauncherLines final : public TrainingObserver {
public:
	LauncherLines() : enabled_(under_elastic_launcher()) {}
	void started(int64_t step, bool resumed) override;
	void stepped(int64_t step) override;

private:
	void line(const char* what, int64_t step) const;
	bool enabled_;
};

} // namespace tower
