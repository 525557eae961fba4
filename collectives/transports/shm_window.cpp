// A buffer per rank in one MPI-3 shared-memory window, which every rank of the host reads and writes.
#include "collectives/transports/shm_window.h"

#include <algorithm>
#include <functional>

#include "base/mpi/mpi_check.h"

namespace tower {

SharedWindow::SharedWindow(MPI_Comm comm, size_t bytes)
{
	int size = 1;
	TOWER_MPI(MPI_Comm_rank(comm, &rank_));
	TOWER_MPI(MPI_Comm_size(comm, &size));
	// Non-contiguous: each rank's part starts on its own page, so no two ranks write one cache
	// line and the streaming loops start aligned.
	MPI_Info info = MPI_INFO_NULL;
	TOWER_MPI(MPI_Info_create(&info));
	TOWER_MPI(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
	char* mine = nullptr;
	const int status = MPI_Win_allocate_shared(static_cast<MPI_Aint>(std::max<size_t>(bytes, 64)), 1, info, comm,
						   &mine, &window_);
	MPI_Info_free(&info);
	TOWER_MPI(status);
	bases_.resize(static_cast<size_t>(size));
	sizes_.resize(static_cast<size_t>(size));
	for (int r = 0; r < size; ++r) {
		MPI_Aint length = 0;
		int unit = 0;
		TOWER_MPI(MPI_Win_shared_query(window_, r, &length, &unit, &bases_[static_cast<size_t>(r)]));
		sizes_[static_cast<size_t>(r)] = static_cast<size_t>(length);
	}
}

SharedWindow::~SharedWindow()
{
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (!finalized && window_ != MPI_WIN_NULL)
		MPI_Win_free(&window_);
}

bool SharedWindow::holds(const void* pointer, size_t bytes) const
{
	// std::less gives a total order even for pointers into different objects.
	const char* p = static_cast<const char*>(pointer);
	const char* begin = mine();
	return !std::less<const char*>{}(p, begin) && !std::less<const char*>{}(begin + this->bytes(rank_), p + bytes);
}

} // namespace tower
