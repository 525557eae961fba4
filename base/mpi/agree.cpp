// Turns verdicts that may differ between ranks into one verdict every rank shares.
#include "base/mpi/agree.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

namespace {

// Every rank's text on every rank, in rank order.
std::vector<std::string> all_gather_text(MPI_Comm comm, const std::string& text)
{
	int size = 0;
	MPI_Comm_size(comm, &size);
	int length = static_cast<int>(text.size());
	std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm, &request));
	wait_request(request, {"run agreement", comm});
	int total = 0;
	for (int r = 0; r < size; ++r) {
		offsets[static_cast<size_t>(r)] = total;
		total += lengths[static_cast<size_t>(r)];
	}
	std::string all(static_cast<size_t>(total), '\0');
	TOWER_MPI(MPI_Iallgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
				  comm, &request));
	wait_request(request, {"run agreement", comm});
	std::vector<std::string> out;
	for (int r = 0; r < size; ++r)
		out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
					 static_cast<size_t>(lengths[static_cast<size_t>(r)])));
	return out;
}

// Fields travel as name US value RS ...: the separators are control characters no option holds.
constexpr char unit_separator = '\x1f', record_separator = '\x1e';

std::string encode(const std::vector<AgreedField>& fields)
{
	std::string out;
	for (const auto& [name, value] : fields)
		out += name + unit_separator + value + record_separator;
	return out;
}

std::vector<AgreedField> decode(const std::string& text)
{
	std::vector<AgreedField> out;
	size_t at = 0;
	while (at < text.size()) {
		const size_t unit = text.find(unit_separator, at), end = text.find(record_separator, at);
		if (unit == std::string::npos || end == std::string::npos || unit > end)
			break;
		out.push_back({text.substr(at, unit - at), text.substr(unit + 1, end - unit - 1)});
		at = end + 1;
	}
	return out;
}

// "0.05 on ranks 0, 2 and 0.01 on rank 1"
std::string values_by_rank(const std::vector<std::string>& values)
{
	std::vector<std::pair<std::string, std::vector<int>>> groups;
	for (size_t r = 0; r < values.size(); ++r) {
		auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == values[r]; });
		if (same == groups.end())
			groups.push_back({values[r], {static_cast<int>(r)}});
		else
			same->second.push_back(static_cast<int>(r));
	}
	std::vector<std::string> parts;
	for (const auto& [value, ranks] : groups)
		parts.push_back(fmt::format("{} on {} {}", value, ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", ")));
	std::string out;
	for (size_t i = 0; i < parts.size(); ++i)
		out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
	return out;
}

} // namespace

void agree_on_fields(MPI_Comm comm, const std::vector<AgreedField>& fields, const std::string& what)
{
	const auto texts = all_gather_text(comm, encode(fields));
	std::vector<std::vector<AgreedField>> all;
	for (const auto& t : texts)
		all.push_back(decode(t));
	// Every name any rank sent, in the order of first appearance (rank 0's list first).
	std::vector<std::string> names;
	for (const auto& rank_fields : all)
		for (const auto& f : rank_fields)
			if (std::find(names.begin(), names.end(), f.first) == names.end())
				names.push_back(f.first);
	std::vector<std::string> differences;
	for (const auto& name : names) {
		std::vector<std::string> values;
		for (const auto& rank_fields : all) {
			auto found = std::find_if(rank_fields.begin(), rank_fields.end(), [&](const auto& f) { return f.first == name; });
			values.push_back(found == rank_fields.end() ? "(absent)" : found->second);
		}
		if (std::any_of(values.begin(), values.end(), [&](const auto& v) { return v != values.front(); }))
			differences.push_back(fmt::format("{} is {}", name, values_by_rank(values)));
	}
	if (!differences.empty())
		throw AgreedError(fmt::format("{}: {}", what, fmt::join(differences, "; ")));
}

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
