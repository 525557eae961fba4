// One value shared by the ranks: a scalar all-reduce and a string broadcast, each a watched wait.
#include "base/mpi/scalars.h"

#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

namespace {

template <typename T> T all_reduce_one(MPI_Comm comm, T value, MPI_Datatype type, MPI_Op op, const char* what)
{
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, &value, 1, type, op, comm, &request));
	wait_request(request, {what, comm});
	return value;
}

} // namespace

double all_reduce_scalar(MPI_Comm comm, double value, MPI_Op op, const char* what)
{
	return all_reduce_one(comm, value, MPI_DOUBLE, op, what);
}

int64_t all_reduce_scalar(MPI_Comm comm, int64_t value, MPI_Op op, const char* what)
{
	return all_reduce_one(comm, value, MPI_INT64_T, op, what);
}

uint64_t all_reduce_scalar(MPI_Comm comm, uint64_t value, MPI_Op op, const char* what)
{
	return all_reduce_one(comm, value, MPI_UINT64_T, op, what);
}

void broadcast_string(MPI_Comm comm, std::string& text, int root, const char* what)
{
	auto length = static_cast<int64_t>(text.size());
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Ibcast(&length, 1, MPI_INT64_T, root, comm, &request));
	wait_request(request, {what, comm});
	text.resize(static_cast<size_t>(length));
	TOWER_MPI(MPI_Ibcast(text.data(), static_cast<int>(length), MPI_CHAR, root, comm, &request));
	wait_request(request, {what, comm});
}

} // namespace tower
