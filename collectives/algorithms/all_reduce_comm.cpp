// All-reduce modes built from a Communicator's calls: the device (NCCL) ring and hierarchical modes.
#include "collectives/algorithms/all_reduce_comm.h"

#include "base/tensor/memory.h"

namespace tower {

CommHierarchicalAllReduce::CommHierarchicalAllReduce(std::unique_ptr<Communicator> node,
						     std::unique_ptr<Communicator> cross,
						     std::unique_ptr<Communicator> group)
    : node_(std::move(node)), cross_(std::move(cross)), group_(std::move(group))
{
}

CommHierarchicalAllReduce::~CommHierarchicalAllReduce()
{
	// The communicators go first (their streams may still read the shard), as the code's rule is
	// everywhere: release a communicator before freeing memory its collectives use.
	const Device device = node_->device();
	group_.reset();
	cross_.reset();
	node_.reset();
	device_free(device, shard_);
}

void CommHierarchicalAllReduce::run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op)
{
	const size_t local = static_cast<size_t>(node_->size()), esize = dtype_size(dtype);
	const size_t block = count / local, body = block * local;
	if (block > 0) {
		if (shard_bytes_ < block * esize) {
			device_free(node_->device(), shard_);
			shard_ = nullptr;
			shard_ = device_alloc(node_->device(), block * esize);
			shard_bytes_ = block * esize;
		}
		// A mean divides by the node size here and by the node count across: the group size.
		node_->reduce_scatter(send, shard_, block, dtype, op);
		cross_->all_reduce(shard_, shard_, block, dtype, op);
		node_->all_gather(shard_, recv, block, dtype);
	}
	if (body < count)
		group_->all_reduce(static_cast<const char*>(send) + body * esize, static_cast<char*>(recv) + body * esize,
				   count - body, dtype, op);
}

} // namespace tower
