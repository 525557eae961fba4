// The one abort path: print "[rank R] message" and take the whole MPI job down.
#pragma once

#include <string_view>

namespace tower {

// Prints "[rank R] message" to stderr and calls MPI_Abort on MPI_COMM_WORLD; if the process is
// still alive 5 s later (MPI_Abort waiting on an unreachable host), it exits by itself with
// status 1. Never returns.
[[noreturn]] void fatal(std::string_view message);

// This process's rank in MPI_COMM_WORLD, or -1 before MPI is initialized.
int world_rank_or_unknown();

} // namespace tower
