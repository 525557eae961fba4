// Polls with a growing sleep, for the async and sync-replicas strategies, whose ranks may idle
// for long: a thin layer over the watched waits of base/watchdog/watched_wait.h.
#pragma once

#include <functional>

#include <mpi.h>

namespace tower {

// Polls `ready` until it returns true, sleeping between polls from a few microseconds up to a
// millisecond, so an idle owner or worker costs little CPU: Open MPI's own MPI_Wait busy-polls,
// which on a machine with as many ranks as cores halves everyone's throughput. `what` names the
// wait for errors and diagnostics.
void wait_until(const char* what, const std::function<bool()>& ready);

// MPI_Wait through wait_until; `status` may be MPI_STATUS_IGNORE.
void wait_with_backoff(MPI_Request& request, const char* what, MPI_Status* status = MPI_STATUS_IGNORE);

} // namespace tower
