// The one abort path: print "[rank R] message" and take the whole MPI job down.
#include "base/fatal.h"

#include <cstdio>
#include <cstdlib>

#include <mpi.h>

namespace tower {

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
	std::fprintf(stderr, "[rank %d] %.*s\n", world_rank_or_unknown(), static_cast<int>(message.size()),
		     message.data());
	std::fflush(stderr);
	if (world_rank_or_unknown() >= 0)
		MPI_Abort(MPI_COMM_WORLD, 1);
	// Without MPI there is no job to take down; this process is all there is.
	std::abort();
}

} // namespace tower
