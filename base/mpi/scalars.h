// One value shared by the ranks: a scalar all-reduce and a string broadcast, each a watched wait.
#pragma once

#include <cstdint>
#include <string>

#include <mpi.h>

namespace tower {

// Collective over `comm`: every rank's `value` combined by `op` (MPI_SUM, MPI_MAX, ...). A stall
// is reported as `what` (a literal) by the watchdog.
double all_reduce_scalar(MPI_Comm comm, double value, MPI_Op op, const char* what);
int64_t all_reduce_scalar(MPI_Comm comm, int64_t value, MPI_Op op, const char* what);
uint64_t all_reduce_scalar(MPI_Comm comm, uint64_t value, MPI_Op op, const char* what);

// Collective over `comm`: root's `text`, of any length, on every rank.
void broadcast_string(MPI_Comm comm, std::string& text, int root, const char* what);

} // namespace tower
