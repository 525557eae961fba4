// Where each rank of this host is waiting, in shared memory, so a stalled rank's peers can name it.
#include "base/watchdog/arrival_table.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace tower {

namespace {

// One cache line pair per rank. Every field is a 64-bit word read and written atomically, so a
// reader may see an entry mid-update (a label from one wait, a time from the next) but never a
// torn word; the report is a diagnosis, not a proof.
constexpr size_t label_words = 10;
struct Entry {
	uint64_t world_rank_plus_one; // 0: unused
	uint64_t state;               // 0: never waited, 1: running, 2: waiting
	uint64_t since_ns;            // steady clock (CLOCK_MONOTONIC: one clock for the whole host)
	uint64_t step_plus_one;
	uint64_t peer_plus_one;
	uint64_t label[label_words];
	uint64_t pid;
};
static_assert(sizeof(Entry) == 128);

Entry* table = nullptr;
int table_size = 0;
Entry* mine = nullptr;
std::atomic<bool> joined{false};

enum State : uint64_t { never = 0, running = 1, waiting = 2 };

uint64_t now_ns()
{
	return static_cast<uint64_t>(
		std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
			.count());
}

void store(uint64_t& word, uint64_t value)
{
	std::atomic_ref<uint64_t>(word).store(value, std::memory_order_relaxed);
}

uint64_t load(uint64_t& word)
{
	return std::atomic_ref<uint64_t>(word).load(std::memory_order_relaxed);
}

// Node rank 0 creates a uniquely named segment, the others open it, and once all have it mapped
// the name is removed: nothing is left behind however the job ends.
Entry* map_segment(MPI_Comm host, int host_rank, int host_size)
{
	char name[64] = {};
	const size_t bytes = sizeof(Entry) * static_cast<size_t>(host_size);
	int ok = 1;
	if (host_rank == 0) {
		std::snprintf(name, sizeof name, "/tower-arrivals-%d-%08x", static_cast<int>(getpid()),
			      static_cast<unsigned>(std::random_device{}()));
		const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
		ok = fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0;
		if (fd >= 0)
			close(fd);
		if (!ok)
			name[0] = '\0';
	}
	MPI_Bcast(name, sizeof name, MPI_CHAR, 0, host);
	void* at = MAP_FAILED;
	if (name[0] != '\0') {
		const int fd = shm_open(name, O_RDWR, 0600);
		if (fd >= 0) {
			at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			close(fd);
		}
	}
	ok = at != MAP_FAILED;
	int all = 0;
	MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, host);
	if (host_rank == 0 && name[0] != '\0')
		shm_unlink(name);
	if (!all) {
		if (at != MAP_FAILED)
			munmap(at, bytes);
		return nullptr;
	}
	return static_cast<Entry*>(at);
}

// The state letter of /proc/PID/stat: T (stopped by a signal) or t (stopped by a tracer).
bool process_stopped(int pid)
{
	char path[64];
	std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE* f = std::fopen(path, "r");
	if (!f)
		return false;
	char text[512] = {};
	const size_t n = std::fread(text, 1, sizeof text - 1, f);
	std::fclose(f);
	// The command name in parentheses may hold spaces: the state follows the last ')'.
	const char* close = std::strrchr(text, ')');
	return n > 0 && close && close[1] == ' ' && (close[2] == 'T' || close[2] == 't');
}

} // namespace

void join_arrival_table(MPI_Comm world)
{
	// Only a communicator of every rank joins: one over some ranks (a one-rank reference
	// Topology on MPI_COMM_SELF) may be built by those ranks alone, and joining there would
	// leave the others waiting in a later join.
	int same = MPI_UNEQUAL;
	MPI_Comm_compare(world, MPI_COMM_WORLD, &same);
	if ((same != MPI_IDENT && same != MPI_CONGRUENT) || joined.exchange(true))
		return;
	int world_rank = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
	MPI_Comm host = MPI_COMM_NULL;
	if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host) != MPI_SUCCESS)
		return;
	int host_rank = 0, host_size = 1;
	MPI_Comm_rank(host, &host_rank);
	MPI_Comm_size(host, &host_size);
	Entry* entries = map_segment(host, host_rank, host_size);
	if (entries) {
		Entry* own = &entries[host_rank];
		store(own->world_rank_plus_one, static_cast<uint64_t>(world_rank) + 1);
		store(own->pid, static_cast<uint64_t>(getpid()));
		store(own->since_ns, now_ns());
		table_size = host_size;
		table = entries;
		mine = own;
	}
	MPI_Comm_free(&host);
}

void arrival_enter(const std::string& operation, int peer_world_rank)
{
	if (!mine)
		return;
	uint64_t words[label_words] = {};
	std::memcpy(words, operation.data(), std::min(operation.size(), sizeof words - 1));
	for (size_t i = 0; i < label_words; ++i)
		store(mine->label[i], words[i]);
	store(mine->peer_plus_one, static_cast<uint64_t>(peer_world_rank + 1));
	store(mine->since_ns, now_ns());
	store(mine->state, waiting);
}

void arrival_leave()
{
	if (!mine)
		return;
	store(mine->since_ns, now_ns());
	store(mine->state, running);
}

void arrival_set_step(int64_t step)
{
	if (mine)
		store(mine->step_plus_one, static_cast<uint64_t>(step + 1));
}

ArrivalState arrival_of(int world_rank)
{
	ArrivalState out;
	for (int i = 0; i < table_size; ++i) {
		Entry& e = table[i];
		if (load(e.world_rank_plus_one) != static_cast<uint64_t>(world_rank) + 1)
			continue;
		out.known = true;
		const uint64_t state = load(e.state);
		out.waiting = state == waiting;
		const uint64_t since = load(e.since_ns), now = now_ns();
		out.seconds = now > since ? static_cast<double>(now - since) * 1e-9 : 0.0;
		out.step = static_cast<int64_t>(load(e.step_plus_one)) - 1;
		out.peer = static_cast<int>(load(e.peer_plus_one)) - 1;
		out.stopped = process_stopped(static_cast<int>(load(e.pid)));
		if (state != never) {
			char text[sizeof e.label + 1] = {};
			for (size_t k = 0; k < label_words; ++k) {
				const uint64_t w = load(e.label[k]);
				std::memcpy(text + k * 8, &w, 8);
			}
			out.operation = text;
		}
		return out;
	}
	return out;
}

} // namespace tower
