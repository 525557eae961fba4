// The ring all-reduce on host memory: reduce-scatter then all-gather, n-1 steps each, pipelined.
#include "collectives/algorithms/all_reduce_ring.h"

#include <algorithm>
#include <cstring>

#include "collectives/transports/mpi_reduce_ops.h"
#include "collectives/algorithms/reduce_host.h"
#include "collectives/segments.h"
#include "base/watchdog/collective_debug.h"
#include "base/mpi/eager_limit.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

namespace {

size_t chunk_elements(size_t chunk_bytes, DType dtype)
{
	return std::clamp<size_t>(chunk_bytes / dtype_size(dtype), 1, mpi_max_count(dtype));
}

size_t chunks_in(size_t length, size_t chunk)
{
	return (length + chunk - 1) / chunk;
}

void wait_all(std::vector<MPI_Request>& requests, const WaitSite& site)
{
	wait_requests(requests, site);
	requests.clear();
}

// The bytes a ring message carries: chunk_bytes, cut across hosts to what Open MPI's TCP
// transport sends eagerly. A larger message waits for the receiver's go-ahead, which queues
// behind the receiver's own outgoing ring data on the same connection: on a 100 Mbit/s link the
// two directions took turns and the ring ran at 60% of the link (eager-sized messages: 97%, and
// 1.4x faster on the unshaped veth too). Agreed by every rank: a receive must not be smaller
// than the message that meets it.
size_t agreed_message_bytes(MPI_Comm comm, size_t chunk_bytes)
{
	unsigned long long bytes = chunk_bytes;
	if (spans_hosts(comm))
		if (const std::optional<size_t> eager = tcp_eager_payload_bytes())
			bytes = std::min<unsigned long long>(bytes, *eager);
	unsigned long long agreed = 0;
	TOWER_MPI(MPI_Allreduce(&bytes, &agreed, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm));
	return static_cast<size_t>(agreed);
}

} // namespace

RingAllReduce::RingAllReduce(MPI_Comm comm, const AllReduceOptions& options)
    : comm_(duplicate_comm(comm))
{
	chunk_bytes_ = agreed_message_bytes(comm_.get(), std::max<size_t>(options.chunk_bytes, 8));
	receives_in_flight_ = std::clamp<size_t>(staging_bytes / chunk_bytes_, min_receives_in_flight, max_receives_in_flight);
	TOWER_MPI(MPI_Comm_rank(comm_.get(), &rank_));
	TOWER_MPI(MPI_Comm_size(comm_.get(), &size_));
	left_ = (rank_ + size_ - 1) % size_;
	right_ = (rank_ + 1) % size_;
	// A chunk of any dtype (a chunk is at least one element) per receive in flight, so run()
	// never allocates.
	staging_.resize(receives_in_flight_ * (chunk_bytes_ + 8));
}

void RingAllReduce::run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op)
{
	check_collective(comm_.get(), {"ring all-reduce", count * dtype_size(dtype), dtype});
	if (send != recv && count > 0)
		std::memcpy(recv, send, count * dtype_size(dtype));
	if (size_ == 1)
		return;
	reduce_scatter(recv, count, dtype, op);
	all_gather(recv, count, dtype);
}

void RingAllReduce::reduce_scatter(void* data, size_t count, DType dtype, ReduceOp op)
{
	for (int step = 0; step + 1 < size_; ++step)
		reduce_scatter_step(static_cast<char*>(data), count, dtype, op, step);
	if (op == ReduceOp::mean) {
		const Segment mine = segment_of(count, static_cast<size_t>(size_), static_cast<size_t>(owned_segment()));
		divide_host(static_cast<char*>(data) + mine.start * dtype_size(dtype), mine.length, dtype, size_);
	}
}

void RingAllReduce::all_gather(void* data, size_t count, DType dtype)
{
	for (int step = 0; step + 1 < size_; ++step)
		all_gather_step(static_cast<char*>(data), count, dtype, step);
}

void RingAllReduce::reduce_scatter_step(char* data, size_t count, DType dtype, ReduceOp op, int step)
{
	const size_t n = static_cast<size_t>(size_), esize = dtype_size(dtype);
	const Segment out = segment_of(count, n, static_cast<size_t>((rank_ - step + size_) % size_));
	const Segment in = segment_of(count, n, static_cast<size_t>((rank_ - step - 1 + 2 * size_) % size_));
	const size_t chunk = chunk_elements(chunk_bytes_, dtype);
	const MPI_Datatype type = mpi_datatype(dtype);

	std::vector<MPI_Request> sends;
	for (size_t c = 0; c < chunks_in(out.length, chunk); ++c) {
		const size_t first = c * chunk, m = std::min(chunk, out.length - first);
		sends.emplace_back();
		TOWER_MPI(MPI_Isend(data + (out.start + first) * esize, static_cast<int>(m), type, right_, step,
				    comm_.get(), &sends.back()));
	}
	// Several receives stay posted, each into its own staging chunk: a chunk above the transport's
	// eager limit waits for its receive to be posted, so with one receive at a time the link
	// idles for a round trip per chunk (across hosts over TCP that was a third of its rate). An
	// eager chunk that arrives before its receive is posted waits in MPI's unexpected queue (a
	// copy); the reduction runs faster than a link, so the posted receives stay ahead of it.
	const size_t in_chunks = chunks_in(in.length, chunk);
	std::vector<MPI_Request> pending(receives_in_flight_, MPI_REQUEST_NULL);
	auto buffer = [&](size_t c) { return staging_.data() + (c % receives_in_flight_) * chunk * esize; };
	auto post = [&](size_t c) {
		const size_t m = std::min(chunk, in.length - c * chunk);
		TOWER_MPI(MPI_Irecv(buffer(c), static_cast<int>(m), type, left_, step, comm_.get(),
				    &pending[c % receives_in_flight_]));
	};
	for (size_t c = 0; c < std::min(in_chunks, receives_in_flight_); ++c)
		post(c);
	for (size_t c = 0; c < in_chunks; ++c) {
		wait_request(pending[c % receives_in_flight_], {"ring all-reduce (reduce-scatter)", comm_.get(), left_, "step", step});
		const size_t first = c * chunk, m = std::min(chunk, in.length - first);
		reduce_keeping_progress(data + (in.start + first) * esize, buffer(c), m, dtype, op);
		if (c + receives_in_flight_ < in_chunks)
			post(c + receives_in_flight_);
	}
	wait_all(sends, {"ring all-reduce (reduce-scatter send)", comm_.get(), right_, "step", step});
}

void RingAllReduce::reduce_keeping_progress(char* target, const char* received, size_t count, DType dtype,
					    ReduceOp op)
{
	// Open MPI's TCP transport moves data only inside MPI calls: a probe between blocks of the
	// reduction keeps the other chunks' transfers going while this one is reduced.
	const size_t esize = dtype_size(dtype), block = std::max<size_t>(progress_block_bytes / esize, 1);
	for (size_t first = 0; first < count; first += block) {
		const size_t m = std::min(block, count - first);
		const void* inputs[2] = {target + first * esize, received + first * esize};
		reduce_host(target + first * esize, inputs, 2, m, dtype, op);
		int flag = 0;
		TOWER_MPI(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_.get(), &flag, MPI_STATUS_IGNORE));
	}
}

void RingAllReduce::all_gather_step(char* data, size_t count, DType dtype, int step)
{
	const size_t n = static_cast<size_t>(size_), esize = dtype_size(dtype);
	const Segment out = segment_of(count, n, static_cast<size_t>((rank_ - step + 1 + size_) % size_));
	const Segment in = segment_of(count, n, static_cast<size_t>((rank_ - step + size_) % size_));
	const size_t chunk = chunk_elements(chunk_bytes_, dtype);
	const MPI_Datatype type = mpi_datatype(dtype);
	std::vector<MPI_Request> requests;
	// Finished segments need no reduction, so they land in place, every receive posted before the
	// sends and in the chunks reduce-scatter uses (one large message each way waited for the
	// other direction's data, as above).
	for (size_t first = 0; first < in.length; first += chunk) {
		requests.emplace_back();
		TOWER_MPI(MPI_Irecv(data + (in.start + first) * esize, static_cast<int>(std::min(chunk, in.length - first)),
				    type, left_, step, comm_.get(), &requests.back()));
	}
	for (size_t first = 0; first < out.length; first += chunk) {
		requests.emplace_back();
		TOWER_MPI(MPI_Isend(data + (out.start + first) * esize, static_cast<int>(std::min(chunk, out.length - first)),
				    type, right_, step, comm_.get(), &requests.back()));
	}
	wait_all(requests, {"ring all-reduce (all-gather)", comm_.get(), left_, "step", step});
}

} // namespace tower
