// Test-set evaluation split across the workers, with the totals summed over every rank.
#pragma once

#include <cstdint>

#include <mpi.h>

#include "data/fashion_mnist.h"
#include "runtime/tower.h"

namespace tower {

struct EvalResult {
	double accuracy = 0; // fraction of the test set classified right
	double loss = 0;     // mean cross-entropy over the test set
	int64_t samples = 0;
};

// Collective over `comm` (every rank of the tower's strategy): worker w evaluates the w-th contiguous
// slice of `test` in batches of at most `batch` with the variables its model holds; a rank that
// only serves variables contributes nothing. Every rank returns the same totals.
EvalResult evaluate_test_set(Tower& tower, const Dataset& test, int64_t batch, const Device& device,
			     MPI_Comm comm);

} // namespace tower
