// Polls with a growing sleep, for the async and sync-replicas strategies, whose ranks may idle
// for long: a thin layer over the watched waits of base/watchdog/watched_wait.h.
#include "base/watchdog/backoff_wait.h"

#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

void wait_until(const char* what, const std::function<bool()>& ready)
{
	// Watched like every wait (a stall is named after --stall-warn and aborts after
	// --stall-abort), but sleeping rather than yielding: owners wait most of their lives.
	wait_idle(ready, WaitSite{what});
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
