// The MPI backend of Communicator: host buffers, 64-bit counts sent in int-sized pieces.
#include "collectives/transports/mpi_communicator.h"

#include <algorithm>
#include <cstring>

#include "collectives/algorithms/reduce_host.h"
#include "base/watchdog/collective_debug.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

namespace {

char* at(void* base, size_t elements, DType dtype)
{
	return static_cast<char*>(base) + elements * dtype_size(dtype);
}

const char* at(const void* base, size_t elements, DType dtype)
{
	return static_cast<const char*>(base) + elements * dtype_size(dtype);
}

} // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(duplicate_comm(comm))
{
	TOWER_MPI(MPI_Comm_rank(comm_.get(), &rank_));
	TOWER_MPI(MPI_Comm_size(comm_.get(), &size_));
}

void MpiCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op)
{
	check_collective(comm_.get(), {"all-reduce", count * dtype_size(dtype), dtype});
	const size_t piece = mpi_max_count(dtype);
	for (size_t start = 0; start < count; start += piece) {
		const int n = static_cast<int>(std::min(piece, count - start));
		const void* src = send == recv ? MPI_IN_PLACE : at(send, start, dtype);
		MPI_Request request = MPI_REQUEST_NULL;
		TOWER_MPI(MPI_Iallreduce(src, at(recv, start, dtype), n, mpi_datatype(dtype), ops_.get(dtype, op),
					 comm_.get(), &request));
		wait_request(request, {"MPI all-reduce", comm_.get()});
	}
	if (op == ReduceOp::mean)
		divide_host(recv, count, dtype, size_);
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op)
{
	check_collective(comm_.get(), {"reduce-scatter", count * dtype_size(dtype), dtype});
	const size_t piece = mpi_max_count(dtype);
	if (count <= piece) {
		MPI_Request request = MPI_REQUEST_NULL;
		TOWER_MPI(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count), mpi_datatype(dtype),
						    ops_.get(dtype, op), comm_.get(), &request));
		wait_request(request, {"MPI reduce-scatter", comm_.get()});
	} else {
		// Blocks over the int limit: reduce each block to its owner, piece by piece.
		for (int root = 0; root < size_; ++root)
			for (size_t start = 0; start < count; start += piece) {
				const int n = static_cast<int>(std::min(piece, count - start));
				const size_t offset = static_cast<size_t>(root) * count + start;
				MPI_Request request = MPI_REQUEST_NULL;
				TOWER_MPI(MPI_Ireduce(at(send, offset, dtype), root == rank_ ? at(recv, start, dtype) : nullptr,
						      n, mpi_datatype(dtype), ops_.get(dtype, op), root, comm_.get(), &request));
				wait_request(request, {"MPI reduce-scatter (by root)", comm_.get()});
			}
	}
	if (op == ReduceOp::mean)
		divide_host(recv, count, dtype, size_);
}

void MpiCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype)
{
	check_collective(comm_.get(), {"all-gather", count * dtype_size(dtype), dtype});
	const size_t piece = mpi_max_count(dtype);
	if (count <= piece) {
		MPI_Request request = MPI_REQUEST_NULL;
		TOWER_MPI(MPI_Iallgather(send, static_cast<int>(count), mpi_datatype(dtype), recv,
					 static_cast<int>(count), mpi_datatype(dtype), comm_.get(), &request));
		wait_request(request, {"MPI all-gather", comm_.get()});
		return;
	}
	std::memcpy(at(recv, static_cast<size_t>(rank_) * count, dtype), send, count * dtype_size(dtype));
	for (int root = 0; root < size_; ++root)
		broadcast(at(recv, static_cast<size_t>(root) * count, dtype), count, dtype, root);
}

void MpiCommunicator::broadcast(void* data, size_t count, DType dtype, int root)
{
	check_collective(comm_.get(), {"broadcast", count * dtype_size(dtype), dtype, root});
	const size_t piece = mpi_max_count(dtype);
	for (size_t start = 0; start < count; start += piece) {
		const int n = static_cast<int>(std::min(piece, count - start));
		MPI_Request request = MPI_REQUEST_NULL;
		TOWER_MPI(MPI_Ibcast(at(data, start, dtype), n, mpi_datatype(dtype), root, comm_.get(), &request));
		wait_request(request, {"MPI broadcast", comm_.get()});
	}
}

void MpiCommunicator::barrier()
{
	check_collective(comm_.get(), {"barrier"});
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Ibarrier(comm_.get(), &request));
	wait_request(request, {"MPI barrier", comm_.get()});
}

} // namespace tower
