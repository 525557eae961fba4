// --debug-collectives: before each collective, the ranks compare what each is about to call.
#pragma once

// Off by default. On (tower train --debug-collectives, or TOWER_DEBUG=collectives in the
// environment), each collective of tower first exchanges a fingerprint among its ranks: the
// sequence number of collectives on that communicator, the operation, the bytes, the dtype, the
// root and the group. A difference throws tower::AgreedError on every rank of the group naming
// the ranks and each fingerprint, where it would otherwise hang or sum unrelated buffers. Ranks
// that call on different communicators never meet: the stall watchdog names them instead.
//
// Wiring a collective in is one line before it: check_collective(comm, {"all-reduce", bytes, dtype}).

#include <atomic>
#include <cstddef>

#include <mpi.h>

#include "base/tensor/dtype.h"

namespace tower {

struct CollectiveCall {
	const char* operation;  // a literal: "all-reduce", "broadcast"
	size_t bytes = 0;       // this rank's send size
	DType dtype = DType::f32;
	int root = -1;          // -1: none
};

// Process-wide; every rank of a job must choose the same (the run agreement compares it).
void set_collective_debug(bool on);

namespace detail {
extern std::atomic<bool> collective_debug_on;
void check_collective(MPI_Comm comm, const CollectiveCall& call);
} // namespace detail

inline bool collective_debug() { return detail::collective_debug_on.load(std::memory_order_relaxed); }

// Collective over `comm` while debugging is on; a load and a branch otherwise.
inline void check_collective(MPI_Comm comm, const CollectiveCall& call)
{
	if (collective_debug())
		detail::check_collective(comm, call);
}

} // namespace tower
