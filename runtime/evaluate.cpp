// Test-set evaluation split across the workers, with the totals summed over every rank.
#include "runtime/evaluate.h"

#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "data/sample_batcher.h"
#include "base/watchdog/collective_debug.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

EvalResult evaluate_test_set(Tower& tower, const SampleSet& test, int64_t batch, const Device& device,
			     MPI_Comm comm)
{
	const int64_t w = tower.worker_index(), workers = tower.workers();
	const int64_t begin = w < 0 ? 0 : test.size() * w / workers;
	const int64_t end = w < 0 ? 0 : test.size() * (w + 1) / workers;
	std::vector<int64_t> indices(static_cast<size_t>(end - begin));
	std::iota(indices.begin(), indices.end(), begin);

	// One batcher per batch size: the full batches and, when the slice does not divide, the last.
	std::map<int64_t, SampleBatcher> batchers;
	double totals[3] = {0, 0, 0}; // summed loss, correct, batches of a model that does not classify
	for (int64_t at = 0; at < static_cast<int64_t>(indices.size()); at += batch) {
		const int64_t n = std::min<int64_t>(batch, static_cast<int64_t>(indices.size()) - at);
		auto it = batchers.try_emplace(n, test, n, device).first;
		const Batch& b = it->second.assemble(std::span<const int64_t>(indices).subspan(static_cast<size_t>(at),
										       static_cast<size_t>(n)));
		const ForwardResult r = tower.evaluate(b);
		totals[0] += static_cast<double>(r.loss) * static_cast<double>(n);
		if (r.correct >= 0)
			totals[1] += static_cast<double>(r.correct);
		else
			totals[2] += 1;
	}
	check_collective(comm, {"evaluation all-reduce", sizeof totals, DType::f64});
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, totals, 3, MPI_DOUBLE, MPI_SUM, comm, &request));
	wait_request(request, {"evaluation totals", comm});
	EvalResult result;
	result.samples = test.size();
	result.loss = test.size() ? totals[0] / static_cast<double>(test.size()) : 0;
	result.classifies = totals[2] == 0;
	result.accuracy = test.size() && result.classifies ? totals[1] / static_cast<double>(test.size()) : 0;
	return result;
}

double EvalResult::perplexity() const
{
	return std::exp(loss);
}

} // namespace tower
