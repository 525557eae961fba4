// Gathers one string from every rank, for reports that rank 0 prints.
#include "base/mpi/gather.h"

#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& text, int root)
{
	int rank = 0, size = 0;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int length = static_cast<int>(text.size());
	std::vector<int> lengths(rank == root ? static_cast<size_t>(size) : 0);
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm, &request));
	wait_request(request, {"string gather", comm});
	std::vector<int> offsets(lengths.size());
	int total = 0;
	for (size_t r = 0; r < lengths.size(); ++r) {
		offsets[r] = total;
		total += lengths[r];
	}
	std::string all(static_cast<size_t>(total), '\0');
	TOWER_MPI(MPI_Igatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
			       root, comm, &request));
	wait_request(request, {"string gather", comm});
	std::vector<std::string> out;
	for (size_t r = 0; r < lengths.size(); ++r)
		out.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(lengths[r])));
	return out;
}

} // namespace tower
