// Runs a command inside an MPI world and turns escaping errors into one clear exit path.
#pragma once

#include <functional>

#include "base/mpi/world.h"

namespace tower::cli {

// Initializes MPI, runs `body`, finalizes. An AgreedError (every rank raised it) prints
// "[rank R] error: ..." on each rank and exits with status 2 after a clean finalize; any other
// error prints the same and aborts the whole job through tower::fatal.
int run_guarded(int* argc, char*** argv, const std::function<int(World&)>& body);

} // namespace tower::cli
