// Where each rank of this host is waiting, in shared memory, so a stalled rank's peers can name it.
#pragma once

#include <cstdint>
#include <string>

#include <mpi.h>

namespace tower {

// One entry per rank of the host, written only by its owner and read by the others when a wait
// has lasted long enough to be reported. A stopped or hung rank cannot answer a message, but its
// entry still says what it last did. Ranks on other hosts are not visible here.
struct ArrivalState {
	bool known = false;    // the rank shares this host and has an entry
	bool waiting = false;  // inside a watched wait now
	bool stopped = false;  // its process is stopped (SIGSTOP, a debugger)
	double seconds = 0;    // since it started waiting, or since it last left a wait
	int64_t step = -1;     // the training step it last reported; -1: none
	int peer = -1;         // world rank it waits for (point-to-point), -1: any
	std::string operation; // what it waits in (or last waited in)
};

// Collective over `world` when it holds every rank of MPI_COMM_WORLD (the first such call only;
// later calls, and calls over fewer ranks, return at once): maps the host's table. Without it (no call, or shared memory unavailable) every lookup answers `known = false`.
void join_arrival_table(MPI_Comm world);

// This rank's own entry: entering and leaving a wait, and the current step. Cheap (a few
// relaxed stores); no-ops without a table.
void arrival_enter(const std::string& operation, int peer_world_rank);
void arrival_leave();
void arrival_set_step(int64_t step);

// Another rank's entry, by its rank in MPI_COMM_WORLD.
ArrivalState arrival_of(int world_rank);

} // namespace tower
