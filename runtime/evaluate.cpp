// Test-set evaluation split across the workers, with the totals summed over every rank.
#include "runtime/evaluate.h"

#include <map>
#include <numeric>
#include <vector>

#include "data/batch_assembler.h"
#include "base/watchdog/collective_debug.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

EvalResult evaluate_test_set(Tower& tower, const Dataset& test, int64_t batch, const Device& device,
			     MPI_Comm comm)
{
	const int64_t w = tower.worker_index(), workers = tower.workers();
	const int64_t begin = w < 0 ? 0 : test.count * w / workers;
	const int64_t end = w < 0 ? 0 : test.count * (w + 1) / workers;
	std::vector<int64_t> indices(static_cast<size_t>(end - begin));
	std::iota(indices.begin(), indices.end(), begin);

	// One assembler per batch size: the full batches and, when the slice does not divide, the last.
	std::map<int64_t, BatchAssembler> assemblers;
	double totals[2] = {0, 0}; // summed loss, correct
	for (int64_t at = 0; at < static_cast<int64_t>(indices.size()); at += batch) {
		const int64_t n = std::min<int64_t>(batch, static_cast<int64_t>(indices.size()) - at);
		auto it = assemblers.try_emplace(n, test, n, device).first;
		const Batch& b = it->second.assemble(std::span<const int64_t>(indices).subspan(static_cast<size_t>(at),
											   static_cast<size_t>(n)));
		const ForwardResult r = tower.evaluate(b.images, b.labels);
		totals[0] += static_cast<double>(r.loss) * static_cast<double>(n);
		totals[1] += static_cast<double>(r.correct);
	}
	check_collective(comm, {"evaluation all-reduce", sizeof totals, DType::f64});
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, totals, 2, MPI_DOUBLE, MPI_SUM, comm, &request));
	wait_request(request, {"evaluation totals", comm});
	EvalResult result;
	result.samples = test.count;
	result.loss = test.count ? totals[0] / static_cast<double>(test.count) : 0;
	result.accuracy = test.count ? totals[1] / static_cast<double>(test.count) : 0;
	return result;
}

} // namespace tower
