// The one place where the async and sync-replicas strategies block: watched waits that sleep.
#include "runtime/backoff_wait.h"


#include "runtime/base/mpi_check.h"
#include "runtime/base/watched_wait.h"

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
