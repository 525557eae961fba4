// Seconds from the steady clock as doubles: the one conversion every timer in tower uses.
#pragma once

#include <chrono>

namespace tower {

using SteadyClock = std::chrono::steady_clock;

inline double seconds(SteadyClock::duration d)
{
	return std::chrono::duration<double>(d).count();
}

inline double seconds_since(SteadyClock::time_point t)
{
	return seconds(SteadyClock::now() - t);
}

} // namespace tower
