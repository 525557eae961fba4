// Test-set evaluation split across the workers, with the totals summed over every rank.
#pragma once

#include <cstdint>

#include <mpi.h>

#include "data/sample_set.h"
#include "runtime/tower.h"

namespace tower {

// What the model defines: its mean loss always, accuracy when it classifies.
struct EvalResult {
	double loss = 0;        // the model's loss, a mean over the test set
	bool classifies = true; // the model counted right answers: accuracy is meaningful
	double accuracy = 0;    // fraction of the test set classified right
	int64_t samples = 0;
	double perplexity() const;
};

// Collective over `comm` (every rank of the tower's strategy): worker w evaluates the w-th contiguous
// slice of `test` in batches of at most `batch` with the variables its model holds; a rank that
// only serves variables contributes nothing. Every rank returns the same totals.
EvalResult evaluate_test_set(Tower& tower, const SampleSet& test, int64_t batch, const Device& device,
			     MPI_Comm comm);

} // namespace tower
