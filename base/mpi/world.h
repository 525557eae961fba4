// RAII ownership of MPI: init with a checked thread level, finalize on destruction.
#pragma once

#include <string>

#include <mpi.h>

namespace tower {

// The MPI thread levels in increasing order, as MPI defines them.
enum class ThreadLevel { single, funneled, serialized, multiple };

std::string thread_level_name(ThreadLevel level);

class World {
public:
	// Initializes MPI asking for `wanted`; throws tower::Error naming both levels if the library
	// grants less than `needed`. A World is created once per process.
	World(int* argc, char*** argv, ThreadLevel wanted = ThreadLevel::multiple,
	      ThreadLevel needed = ThreadLevel::multiple);
	~World();

	World(const World&) = delete;
	World& operator=(const World&) = delete;

	int rank() const { return rank_; }
	int size() const { return size_; }
	MPI_Comm comm() const { return MPI_COMM_WORLD; }
	ThreadLevel thread_level() const { return granted_; }

private:
	int rank_ = 0;
	int size_ = 1;
	ThreadLevel granted_ = ThreadLevel::single;
};

} // namespace tower
