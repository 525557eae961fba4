// Turns verdicts that may differ between ranks into one verdict every rank shares.
#include "runtime/base/agree.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "runtime/base/error.h"
#include "runtime/base/mpi_check.h"
#include "runtime/base/watched_wait.h"

namespace tower {

bool all_true(MPI_Comm comm, bool value)
{
	int local = value ? 1 : 0, global = 0;
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallreduce(&local, &global, 1, MPI_INT, MPI_MIN, comm, &request));
	wait_request(request, {"agreement check", comm});
	return global == 1;
}

void agree(MPI_Comm comm, const std::string& problem)
{
	if (all_true(comm, problem.empty()))
		return;
	int size = 0;
	MPI_Comm_size(comm, &size);
	int length = static_cast<int>(problem.size());
	std::vector<int> lengths(static_cast<size_t>(size));
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm, &request));
	wait_request(request, {"agreement report", comm});
	std::vector<int> offsets(static_cast<size_t>(size));
	int total = 0;
	for (int r = 0; r < size; ++r) {
		offsets[static_cast<size_t>(r)] = total;
		total += lengths[static_cast<size_t>(r)];
	}
	std::string all(static_cast<size_t>(total), '\0');
	TOWER_MPI(MPI_Iallgatherv(problem.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
				  MPI_CHAR, comm, &request));
	wait_request(request, {"agreement report", comm});
	// Ranks that found the same problem are named together: "ranks 0, 1: ...".
	std::vector<std::pair<std::string, std::vector<int>>> problems;
	for (int r = 0; r < size; ++r) {
		const auto n = static_cast<size_t>(lengths[static_cast<size_t>(r)]);
		if (n == 0)
			continue;
		const std::string text = all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]), n);
		auto same = std::find_if(problems.begin(), problems.end(), [&](const auto& p) { return p.first == text; });
		if (same == problems.end())
			problems.push_back({text, {r}});
		else
			same->second.push_back(r);
	}
	std::string message;
	for (const auto& [text, ranks] : problems)
		message += fmt::format("{}{} {}: {}", message.empty() ? "" : "; ", ranks.size() == 1 ? "rank" : "ranks",
				       fmt::join(ranks, ", "), text);
	throw AgreedError(message);
}

} // namespace tower
