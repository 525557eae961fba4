// Turns verdicts that may differ between ranks into one verdict every rank shares.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

namespace tower {

// Collective over `comm`. Each rank passes an empty string when all is well, or what it found
// wrong. If any rank found a problem, every rank throws tower::AgreedError listing each failing
// rank's problem ("rank 2: ..."), so no rank goes on into a collective the others left.
void agree(MPI_Comm comm, const std::string& problem);

// A named value every rank must hold alike: {"`lr`", "0.05"}.
using AgreedField = std::pair<std::string, std::string>;

// Collective over `comm`: compares every rank's fields by name. When any differs (or is missing
// on some rank), every rank throws tower::AgreedError "<what>: `lr` is 0.05 on ranks 0, 2 and
// 0.01 on rank 1; ..." naming every differing field, ranks with the same value together. The
// exchange has the same shape whatever the fields hold, so it cannot hang on a difference.
void agree_on_fields(MPI_Comm comm, const std::vector<AgreedField>& fields, const std::string& what);

// Collective over `comm`: true on every rank when `value` is true on every rank.
bool all_true(MPI_Comm comm, bool value);

} // namespace tower
