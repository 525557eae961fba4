// A buffer per rank in one MPI-3 shared-memory window, which every rank of the host reads and writes.
#pragma once

#include <cstddef>
#include <vector>

#include <mpi.h>

namespace tower {

// Collective allocation over a communicator whose ranks share memory: each rank gets `bytes` of
// its own (page aligned) and the addresses of everyone else's. Freeing is collective too, so the
// ranks destroy their windows in the same order.
class SharedWindow {
public:
	SharedWindow(MPI_Comm comm, size_t bytes);
	~SharedWindow();
	SharedWindow(const SharedWindow&) = delete;
	SharedWindow& operator=(const SharedWindow&) = delete;

	char* base(int rank) const { return bases_[static_cast<size_t>(rank)]; }
	size_t bytes(int rank) const { return sizes_[static_cast<size_t>(rank)]; }
	char* mine() const { return base(rank_); }
	// True when [pointer, pointer + bytes) lies inside this rank's own buffer.
	bool holds(const void* pointer, size_t bytes) const;

private:
	MPI_Win window_ = MPI_WIN_NULL;
	int rank_ = 0;
	std::vector<char*> bases_;
	std::vector<size_t> sizes_;
};

} // namespace tower
