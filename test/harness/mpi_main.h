// The MPI-aware doctest entry point shared by every test binary.
#pragma once

#include "base/mpi/topology.h"
#include "base/mpi/world.h"

namespace tower::test {

// The world of the running test binary; valid inside test cases.
World& world();

// Runs every test case on every rank and combines the verdicts: a test case fails when it fails
// on any rank, and rank 0 names the failing ranks. With `needs_gpu`, all ranks first agree
// whether each has a GPU of its own (at least as many visible GPUs as ranks on its host); if
// any does not, all finalize and return 77 (meson's SKIP). Otherwise each rank's current
// device is its host-local rank.
int run_tests(int argc, char** argv, bool needs_gpu);

} // namespace tower::test
