// Checks that every rank holds the same list of named tensors (names, dtypes, shapes, order).
#pragma once

#include <string_view>
#include <vector>

#include <mpi.h>

#include "base/tensor/named_tensor.h"
#include "base/tensor/parameter.h"

namespace tower {

// Collective over `comm`. Compares each rank's list with root's; when any differs, throws
// tower::AgreedError on every rank, naming each differing rank and its first differing entries,
// prefixed by `what` ("gradient list", "broadcast list"). No data moves.
void check_signatures(MPI_Comm comm, const std::vector<NamedTensor>& tensors, int root, std::string_view what);

// Collective: check_signatures of the parameters' gradients against rank 0's, as the "gradient list".
void check_gradient_list(MPI_Comm comm, const std::vector<Parameter*>& parameters);

} // namespace tower
