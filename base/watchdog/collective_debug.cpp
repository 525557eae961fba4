// --debug-collectives: before each collective, the ranks compare what each is about to call.
#include "base/watchdog/collective_debug.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

namespace {

bool asked_by_environment()
{
	const char* debug = std::getenv("TOWER_DEBUG");
	return debug && std::string(debug).find("collectives") != std::string::npos;
}

// The check talks point-to-point on the collective's own communicator: point-to-point messages
// never match collectives, and no rank uses this tag (the ring's tags are its step numbers).
constexpr int check_tag = 32001;

// What one rank is about to call, as it travels.
struct Fingerprint {
	uint64_t sequence;
	uint64_t bytes;
	int32_t dtype;
	int32_t root;
	uint64_t group_hash;
	int32_t group_size;
	int32_t unused;
	char operation[64];

	bool operator==(const Fingerprint& o) const
	{
		return sequence == o.sequence && bytes == o.bytes && dtype == o.dtype && root == o.root &&
		       group_hash == o.group_hash && group_size == o.group_size &&
		       std::strncmp(operation, o.operation, sizeof operation) == 0;
	}
};

// Kept on each communicator as an attribute, so it dies with the communicator (a pointer-keyed
// map would carry a freed communicator's count over to a new one at the same address).
struct CommRecord {
	uint64_t calls = 0;
	uint64_t group_hash = 0;
	std::vector<int> world_ranks;
};

int delete_record(MPI_Comm, int, void* value, void*)
{
	delete static_cast<CommRecord*>(value);
	return MPI_SUCCESS;
}

int record_key();

// MPI_COMM_SELF's attributes are deleted first thing in MPI_Finalize: the keyval goes with them,
// so the process leaves nothing of ours behind.
int free_record_key(MPI_Comm, int, void*, void*)
{
	int key = record_key();
	return MPI_Comm_free_keyval(&key);
}

int record_key()
{
	static const int key = [] {
		int k = MPI_KEYVAL_INVALID;
		TOWER_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_record, &k, nullptr));
		int at_finalize = MPI_KEYVAL_INVALID;
		TOWER_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_record_key, &at_finalize, nullptr));
		TOWER_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, at_finalize, nullptr));
		TOWER_MPI(MPI_Comm_free_keyval(&at_finalize)); // the attribute set on MPI_COMM_SELF stays
		return k;
	}();
	return key;
}

CommRecord& record_of(MPI_Comm comm)
{
	void* value = nullptr;
	int found = 0;
	TOWER_MPI(MPI_Comm_get_attr(comm, record_key(), &value, &found));
	if (found)
		return *static_cast<CommRecord*>(value);
	auto* record = new CommRecord;
	MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
	MPI_Comm_group(comm, &group);
	MPI_Comm_group(MPI_COMM_WORLD, &world);
	int size = 0;
	MPI_Group_size(group, &size);
	std::vector<int> ranks(static_cast<size_t>(size));
	for (int r = 0; r < size; ++r)
		ranks[static_cast<size_t>(r)] = r;
	record->world_ranks.resize(ranks.size());
	MPI_Group_translate_ranks(group, size, ranks.data(), world, record->world_ranks.data());
	MPI_Group_free(&group);
	MPI_Group_free(&world);
	record->group_hash = 1469598103934665603ull;
	for (int r : record->world_ranks)
		record->group_hash = (record->group_hash ^ static_cast<uint64_t>(r + 1)) * 1099511628211ull;
	TOWER_MPI(MPI_Comm_set_attr(comm, record_key(), record));
	return *record;
}

std::string describe(const Fingerprint& f)
{
	std::string out = fmt::format("#{} {} of {} bytes of {}", f.sequence, f.operation, f.bytes,
				      dtype_name(static_cast<DType>(f.dtype)));
	if (f.root >= 0)
		out += fmt::format(", root {}", f.root);
	return out + fmt::format(", group of {} (hash {:08x})", f.group_size, f.group_hash & 0xffffffffu);
}

// Every rank's fingerprint on every rank: the group's first rank collects and sends them back.
std::vector<Fingerprint> exchange(MPI_Comm comm, int rank, int size, const Fingerprint& mine)
{
	std::vector<Fingerprint> all(static_cast<size_t>(size));
	std::vector<MPI_Request> requests;
	const WaitSite site{"collective check (`debug_collectives`)", comm};
	if (rank == 0) {
		all[0] = mine;
		for (int r = 1; r < size; ++r) {
			requests.emplace_back();
			TOWER_MPI(MPI_Irecv(&all[static_cast<size_t>(r)], sizeof(Fingerprint), MPI_BYTE, r, check_tag, comm,
					    &requests.back()));
		}
		wait_requests(requests, site);
		requests.clear();
		for (int r = 1; r < size; ++r) {
			requests.emplace_back();
			TOWER_MPI(MPI_Isend(all.data(), static_cast<int>(sizeof(Fingerprint) * all.size()), MPI_BYTE, r,
					    check_tag, comm, &requests.back()));
		}
	} else {
		requests.resize(2);
		TOWER_MPI(MPI_Isend(&mine, sizeof(Fingerprint), MPI_BYTE, 0, check_tag, comm, &requests[0]));
		TOWER_MPI(MPI_Irecv(all.data(), static_cast<int>(sizeof(Fingerprint) * all.size()), MPI_BYTE, 0, check_tag,
				    comm, &requests[1]));
	}
	wait_requests(requests, site);
	return all;
}

} // namespace

namespace detail {

std::atomic<bool> collective_debug_on{asked_by_environment()};

void check_collective(MPI_Comm comm, const CollectiveCall& call)
{
	int rank = 0, size = 1;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	CommRecord& record = record_of(comm);
	Fingerprint mine{};
	mine.sequence = ++record.calls;
	mine.bytes = call.bytes;
	mine.dtype = static_cast<int32_t>(call.dtype);
	mine.root = call.root;
	mine.group_hash = record.group_hash;
	mine.group_size = size;
	std::strncpy(mine.operation, call.operation, sizeof mine.operation - 1);
	if (size == 1)
		return;
	const auto all = exchange(comm, rank, size, mine);
	// Ranks with the same fingerprint are named together, by world rank.
	std::vector<std::pair<Fingerprint, std::vector<int>>> kinds;
	for (int r = 0; r < size; ++r) {
		const Fingerprint& f = all[static_cast<size_t>(r)];
		auto same = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == f; });
		const int world = record.world_ranks[static_cast<size_t>(r)];
		if (same == kinds.end())
			kinds.push_back({f, {world}});
		else
			same->second.push_back(world);
	}
	if (kinds.size() == 1)
		return;
	std::vector<std::string> parts;
	for (const auto& [f, ranks] : kinds)
		parts.push_back(fmt::format("{} {} call{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "),
					    ranks.size() == 1 ? "s" : "", describe(f)));
	throw AgreedError(fmt::format("collective mismatch (`debug_collectives`): {}; every rank of a group must call the "
				      "same collectives in the same order",
				      fmt::join(parts, "; ")));
}

} // namespace detail

void set_collective_debug(bool on)
{
	detail::collective_debug_on = on;
}

} // namespace tower
