// RAII ownership of MPI: init with a checked thread level, finalize on destruction.
#include "base/mpi/world.h"

#include "base/error.h"

namespace tower {

namespace {

ThreadLevel from_mpi(int level)
{
	switch (level) {
	case MPI_THREAD_SINGLE: return ThreadLevel::single;
	case MPI_THREAD_FUNNELED: return ThreadLevel::funneled;
	case MPI_THREAD_SERIALIZED: return ThreadLevel::serialized;
	default: return ThreadLevel::multiple;
	}
}

int to_mpi(ThreadLevel level)
{
	switch (level) {
	case ThreadLevel::single: return MPI_THREAD_SINGLE;
	case ThreadLevel::funneled: return MPI_THREAD_FUNNELED;
	case ThreadLevel::serialized: return MPI_THREAD_SERIALIZED;
	case ThreadLevel::multiple: return MPI_THREAD_MULTIPLE;
	}
	return MPI_THREAD_MULTIPLE;
}

} // namespace

std::string thread_level_name(ThreadLevel level)
{
	switch (level) {
	case ThreadLevel::single: return "MPI_THREAD_SINGLE";
	case ThreadLevel::funneled: return "MPI_THREAD_FUNNELED";
	case ThreadLevel::serialized: return "MPI_THREAD_SERIALIZED";
	case ThreadLevel::multiple: return "MPI_THREAD_MULTIPLE";
	}
	return "unknown";
}

World::World(int* argc, char*** argv, ThreadLevel wanted, ThreadLevel needed)
{
	int provided = MPI_THREAD_SINGLE;
	if (MPI_Init_thread(argc, argv, to_mpi(wanted), &provided) != MPI_SUCCESS)
		throw Error("MPI_Init_thread failed: is this program started by mpirun with a working MPI?");
	granted_ = from_mpi(provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
	MPI_Comm_size(MPI_COMM_WORLD, &size_);
	// Errors from MPI calls come back as codes we check, instead of aborting inside MPI.
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (granted_ < needed) {
		MPI_Finalize();
		throw Error(fmt::format("the MPI library granted {} but tower needs {} (its communication "
					"thread calls MPI beside the main thread); use an MPI built with thread "
					"support, such as Open MPI 4 or later",
					thread_level_name(granted_), thread_level_name(needed)));
	}
}

World::~World()
{
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (!finalized)
		MPI_Finalize();
}

} // namespace tower
