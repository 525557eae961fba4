// Checks the return codes of MPI calls and turns failures into tower::Error.
#pragma once

#include <string_view>

namespace tower {

// Throws tower::Error with MPI's own description of `rc` and the call that returned it.
void mpi_check(int rc, std::string_view call);

} // namespace tower

#define TOWER_MPI(call) ::tower::mpi_check((call), #call)
