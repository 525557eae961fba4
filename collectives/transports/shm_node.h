// Shared memory among the ranks of one host: a slot per rank in an MPI-3 window, and a flag barrier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <mpi.h>

#include "base/mpi/topology.h"

namespace tower {

// Every rank owns one slot that all ranks of the communicator can read and write directly. The
// ranks synchronize through per-rank counters in the window, which costs far less than an MPI
// barrier; waits are watched (base/watchdog/watched_wait.h): they back off from spinning and name
// the ranks that have not arrived when a barrier stalls.
class ShmNode {
public:
	// Collective over `comm`, whose ranks must share memory; allocates `slot_bytes` per rank on a
	// private duplicate of `comm`.
	ShmNode(MPI_Comm comm, size_t slot_bytes);
	~ShmNode();
	ShmNode(const ShmNode&) = delete;
	ShmNode& operator=(const ShmNode&) = delete;

	int rank() const { return rank_; }
	int size() const { return size_; }
	size_t slot_bytes() const { return slot_bytes_; }
	char* slot(int rank) const { return slots_[static_cast<size_t>(rank)]; }
	// A few words per rank beside the barrier counter, for what the ranks tell each other
	// before a barrier (written by the owner, read by all after the barrier).
	static constexpr size_t mailbox_words = 4;
	uint64_t* mailbox(int rank) const { return counters_[static_cast<size_t>(rank)] + mailbox_offset_words; }
	// The private communicator, for further collective allocations among the same ranks.
	MPI_Comm comm() const { return comm_.get(); }

	// Returns when every rank has called it as often as this one: all writes made before it on
	// any rank are visible after it on every rank.
	// `operation` names the wait in a stall report.
	void barrier(const char* operation = "node barrier (shared memory)");

private:
	static constexpr size_t mailbox_offset_words = 8; // the second cache line of the header

	CommHandle comm_;
	MPI_Win window_ = MPI_WIN_NULL;
	int rank_ = 0, size_ = 1;
	size_t slot_bytes_ = 0;
	std::vector<char*> slots_;
	std::vector<uint64_t*> counters_;
	uint64_t epoch_ = 0;
};

} // namespace tower
