// Test-set evaluation split across the ranks, with the totals summed over all of them.
#pragma once

#include <cstdint>

#include "models/data/fashion_mnist.h"
#include "runtime/replicated_builder.h"

namespace tower::cli {

struct EvalResult {
	double accuracy = 0; // fraction of the test set classified right
	double loss = 0;     // mean cross-entropy over the test set
	int64_t samples = 0;
};

// Collective over the topology's world: rank r evaluates the r-th contiguous slice of `test` in
// batches of at most `batch`; every rank returns the same totals.
EvalResult evaluate_test_set(ReplicatedBuilder& builder, const Dataset& test, int64_t batch, const Device& device,
			     const Topology& topology);

} // namespace tower::cli
