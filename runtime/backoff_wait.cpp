// The one place where the async and sync-replicas strategies block: polls with a growing sleep.
#include "runtime/backoff_wait.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "runtime/base/mpi_check.h"

namespace tower {

void wait_until(const char* what, const std::function<bool()>& ready)
{
	(void)what; // named for the diagnostics a watchdog attaches here
	// A few polls back to back catch a reply already on its way; then the sleep doubles, so a
	// long wait polls about a thousand times a second.
	for (int i = 0; i < 16; ++i)
		if (ready())
			return;
	auto pause = std::chrono::microseconds(8);
	const auto longest = std::chrono::microseconds(1000);
	while (!ready()) {
		std::this_thread::sleep_for(pause);
		pause = std::min(pause * 2, longest);
	}
}

void wait_with_backoff(MPI_Request& request, const char* what, MPI_Status* status)
{
	wait_until(what, [&] {
		int done = 0;
		TOWER_MPI(MPI_Test(&request, &done, status));
		return done != 0;
	});
}

} // namespace tower
