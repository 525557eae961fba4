// All-reduce modes built from a Communicator's calls: the device (NCCL) ring and hierarchical modes.
#pragma once

#include <memory>

#include "collectives/all_reduce.h"
#include "collectives/transports/communicator.h"

namespace tower {

// The ring mode on a device: the communicator's own all-reduce (ncclAllReduce runs a ring).
class CommRingAllReduce final : public AllReduce {
public:
	explicit CommRingAllReduce(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}

	AllReduceMode mode() const override { return AllReduceMode::ring; }
	int group_size() const override { return comm_->size(); }
	void run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override
	{
		comm_->all_reduce(send, recv, count, dtype, op);
	}

private:
	std::unique_ptr<Communicator> comm_;
};

// The hierarchical mode on a device: reduce-scatter in the node, all-reduce of the shard across
// nodes, all-gather in the node. The elements past the largest multiple of the node size are
// all-reduced over the whole group, since the node collectives need equal blocks.
class CommHierarchicalAllReduce final : public AllReduce {
public:
	CommHierarchicalAllReduce(std::unique_ptr<Communicator> node, std::unique_ptr<Communicator> cross,
				  std::unique_ptr<Communicator> group);
	~CommHierarchicalAllReduce() override;

	AllReduceMode mode() const override { return AllReduceMode::hierarchical; }
	int group_size() const override { return group_->size(); }
	void run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;

private:
	std::unique_ptr<Communicator> node_, cross_, group_;
	void* shard_ = nullptr; // on the device; grown to the largest shard seen
	size_t shard_bytes_ = 0;
};

} // namespace tower
