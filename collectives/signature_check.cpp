// Checks that every rank holds the same list of named tensors (names, dtypes, shapes, order).
#include "collectives/signature_check.h"

#include <algorithm>
#include <sstream>

#include "base/mpi/agree.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"
#include "base/mpi/scalars.h"

namespace tower {

namespace {

std::string entry_signature(const NamedTensor& t)
{
	return fmt::format("{} {} {}", t.name, dtype_name(t.tensor.dtype()), shape_text(t.tensor.shape()));
}

std::vector<std::string> signature(const std::vector<NamedTensor>& tensors)
{
	std::vector<std::string> out;
	for (const auto& t : tensors)
		out.push_back(entry_signature(t));
	return out;
}

// Root's signature, one entry a line, on every rank.
std::vector<std::string> root_signature(MPI_Comm comm, const std::vector<std::string>& mine, int root)
{
	std::string text;
	for (const auto& line : mine)
		text += line + "\n";
	broadcast_string(comm, text, root, "signature check");
	std::vector<std::string> out;
	std::istringstream lines(text);
	for (std::string line; std::getline(lines, line);)
		out.push_back(line);
	return out;
}

// What differs from root's list, naming at most a few entries; empty when they match.
std::string differences(const std::vector<std::string>& mine, const std::vector<std::string>& root, int root_rank)
{
	std::string out;
	int named = 0;
	for (size_t i = 0; i < std::max(mine.size(), root.size()) && named < 4; ++i) {
		const std::string a = i < mine.size() ? mine[i] : "(none)";
		const std::string b = i < root.size() ? root[i] : "(none)";
		if (a == b)
			continue;
		out += fmt::format("{}entry {} is '{}' here but '{}' on rank {}", out.empty() ? "" : "; ", i, a, b, root_rank);
		++named;
	}
	if (!out.empty() && mine.size() != root.size())
		out += fmt::format(" ({} entries here, {} on rank {})", mine.size(), root.size(), root_rank);
	return out;
}

} // namespace

void check_signatures(MPI_Comm comm, const std::vector<NamedTensor>& tensors, int root, std::string_view what)
{
	const auto mine = signature(tensors);
	const std::string problem = differences(mine, root_signature(comm, mine, root), root);
	agree(comm, problem.empty() ? "" : fmt::format("{} differs from rank {}'s: {}", what, root, problem));
}

void check_gradient_list(MPI_Comm comm, const std::vector<Parameter*>& parameters)
{
	std::vector<NamedTensor> gradients;
	for (const Parameter* p : parameters)
		gradients.push_back({p->name, p->grad});
	check_signatures(comm, gradients, 0, "gradient list");
}

} // namespace tower
