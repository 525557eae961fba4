// The naive all-reduce: MPI_Allreduce on host memory, through a host copy for device buffers.
#include "collectives/algorithms/all_reduce_naive.h"

#include "base/tensor/memory.h"

namespace tower {

NaiveAllReduce::NaiveAllReduce(MPI_Comm comm, const Device& device) : comm_(comm), device_(device) {}

void NaiveAllReduce::run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op)
{
	if (!device_.is_cuda()) {
		comm_.all_reduce(send, recv, count, dtype, op);
		return;
	}
	const size_t bytes = count * dtype_size(dtype);
	if (host_.size() < bytes)
		host_.resize(bytes);
	const Device cpu;
	copy_bytes(host_.data(), cpu, send, device_, bytes);
	comm_.all_reduce(host_.data(), host_.data(), count, dtype, op);
	copy_bytes(recv, device_, host_.data(), cpu, bytes);
}

} // namespace tower
