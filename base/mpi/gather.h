// Gathers one string from every rank, for reports that rank 0 prints.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>

namespace tower {

// Collective over `comm`: returns every rank's `text`, in rank order, on `root`; an empty list
// elsewhere.
std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& text, int root = 0);

} // namespace tower
