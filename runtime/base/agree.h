// Turns verdicts that may differ between ranks into one verdict every rank shares.
#pragma once

#include <string>

#include <mpi.h>

namespace tower {

// Collective over `comm`. Each rank passes an empty string when all is well, or what it found
// wrong. If any rank found a problem, every rank throws tower::AgreedError listing each failing
// rank's problem ("rank 2: ..."), so no rank goes on into a collective the others left.
void agree(MPI_Comm comm, const std::string& problem);

// Collective over `comm`: true on every rank when `value` is true on every rank.
bool all_true(MPI_Comm comm, bool value);

} // namespace tower
