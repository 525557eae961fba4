// The one abort path: print "[rank R] message" and take the whole MPI job down.
#include "base/fatal.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <mpi.h>

#include "base/field_spelling.h"

namespace tower {

namespace {

constexpr std::chrono::seconds abort_grace{5};

} // namespace

int world_rank_or_unknown()
{
	int initialized = 0, finalized = 0;
	MPI_Initialized(&initialized);
	MPI_Finalized(&finalized);
	if (!initialized || finalized)
		return -1;
	int rank = -1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	return rank;
}

void fatal(std::string_view message)
{
	const std::string text = spelled(std::string(message));
	std::fprintf(stderr, "[rank %d] %s\n", world_rank_or_unknown(), text.c_str());
	std::fflush(stderr);
	if (world_rank_or_unknown() >= 0) {
		// MPI_Abort asks Open MPI's daemons to end the job, and across a network partition that
		// request can wait minutes on a host nobody reaches. This process ends by itself after a
		// grace period either way, so the side of a partition that aborted does not linger.
		std::thread([] {
			std::this_thread::sleep_for(abort_grace);
			std::_Exit(1);
		}).detach();
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	// Without MPI there is no job to take down; this process is all there is.
	std::abort();
}

} // namespace tower
