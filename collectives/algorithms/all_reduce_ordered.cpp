// The deterministic all-reduce: every element summed in rank order, whatever the mode and topology.
#include "collectives/algorithms/all_reduce_ordered.h"

#include <algorithm>

#include "collectives/algorithms/reduce_host.h"
#include "collectives/segments.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

OrderedAllReduce::OrderedAllReduce(MPI_Comm group, AllReduceMode mode, const AllReduceOptions& options)
	: comm_(duplicate_comm(group)), mode_(mode), chunk_bytes_(std::max<size_t>(options.chunk_bytes, 64))
{
	MPI_Comm_rank(comm_.get(), &rank_);
	MPI_Comm_size(comm_.get(), &size_);
}

void OrderedAllReduce::run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op)
{
	const size_t element = dtype_size(dtype);
	const auto n = static_cast<size_t>(size_);
	const auto me = static_cast<size_t>(rank_);
	// A round covers chunk_bytes of each rank's segment, so MPI's int byte counts always suffice.
	const size_t round = std::max<size_t>(chunk_bytes_ / element, 1) * n;
	gathered_.resize(std::min(round, count) * element + n * element);
	reduced_.resize(std::min(round, count) * element / n + 2 * element);
	std::vector<int> send_counts(n), send_offsets(n), recv_counts(n), recv_offsets(n);
	std::vector<const void*> inputs(n);
	for (size_t at = 0; at < count; at += round) {
		const size_t m = std::min(round, count - at);
		const Segment mine = segment_of(m, n, me);
		for (size_t j = 0; j < n; ++j) {
			const Segment s = segment_of(m, n, j);
			send_counts[j] = static_cast<int>(s.length * element);
			send_offsets[j] = static_cast<int>(s.start * element);
			recv_counts[j] = static_cast<int>(mine.length * element);
			recv_offsets[j] = static_cast<int>(j * mine.length * element);
			inputs[j] = gathered_.data() + j * mine.length * element;
		}
		const char* in = static_cast<const char*>(send) + at * element;
		MPI_Request request = MPI_REQUEST_NULL;
		TOWER_MPI(MPI_Ialltoallv(in, send_counts.data(), send_offsets.data(), MPI_BYTE, gathered_.data(),
					 recv_counts.data(), recv_offsets.data(), MPI_BYTE, comm_.get(), &request));
		wait_request(request, {"ordered all-reduce: segment exchange", comm_.get()});
		// reduce_host folds its inputs in the order given: rank 0's, then rank 1's, ...
		reduce_host(reduced_.data(), inputs.data(), n, mine.length, dtype, op);
		if (op == ReduceOp::mean)
			divide_host(reduced_.data(), mine.length, dtype, size_);
		char* out = static_cast<char*>(recv) + at * element;
		TOWER_MPI(MPI_Iallgatherv(reduced_.data(), send_counts[me], MPI_BYTE, out, send_counts.data(),
					  send_offsets.data(), MPI_BYTE, comm_.get(), &request));
		wait_request(request, {"ordered all-reduce: gather of the sums", comm_.get()});
	}
}

} // namespace tower
