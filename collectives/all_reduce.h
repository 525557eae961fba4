// The all-reduce interface and its factory: ring, hierarchical or naive by mode, each summing in
// rank order when asked to be deterministic; node-sharded only in the CPU hierarchical mode on
// nodes of equal size.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "collectives/all_reduce_mode.h"
#include "collectives/groups.h"
#include "collectives/node_sharding.h"
#include "collectives/reduce_op.h"
#include "base/device/device.h"
#include "base/tensor/dtype.h"
#include "base/mpi/topology.h"

namespace tower {

// One all-reduce algorithm over one replica group. The constructor makes the private
// communicators, shared-memory windows and NCCL communicators (some staging buffers grow on first
// use in run()); run() uses only the object's own communicators, so one thread may call run()
// while others use MPI_COMM_WORLD.
class AllReduce {
public:
	AllReduce() = default;
	virtual ~AllReduce();
	AllReduce(const AllReduce&) = delete;
	AllReduce& operator=(const AllReduce&) = delete;

	virtual AllReduceMode mode() const = 0;
	// The ranks reducing together; mean divides by this.
	virtual int group_size() const = 0;

	// Collective over the group: recv[i] = op over the group of send[i], for `count` elements
	// of `dtype` on the device the algorithm was made for. send == recv reduces in place.
	virtual void run(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) = 0;
	void run_in_place(void* data, size_t count, DType dtype, ReduceOp op) { run(data, data, count, dtype, op); }

	// Host memory for run()'s buffers, valid until deallocate() or until this object is
	// destroyed. Collective over the group: every rank allocates and frees in the same order.
	// Where shares_buffers() is true the memory lies in the node's shared-memory window, and a
	// run() whose buffers all come from here (any offsets, on every rank) reads and writes the
	// peers' buffers directly instead of staging copies; elsewhere it is ordinary host memory.
	virtual void* allocate(size_t bytes);
	virtual void deallocate(void* pointer);
	virtual bool shares_buffers() const { return false; }

	// The sharded form of this all-reduce, where its ranks share the node's memory (see
	// collectives/node_sharding.h); nullptr elsewhere.
	virtual NodeSharding* node_sharding() { return nullptr; }

private:
	std::vector<void*> host_buffers_; // what the default allocate() handed out
};

// Collective over the topology's world: empty when `mode` can run over these nodes and groups on
// `device`; otherwise why not, for people. (Only the hierarchical mode has conditions: on GPUs the
// same number of the group's ranks on every node; on the CPU, nodes whose ranks share memory.)
std::string why_all_reduce_cannot_run(const Topology& topology, const Device& device, AllReduceMode mode,
				      const GroupAssignment& groups);
// Collective: what "auto" means here: NCCL's ring on GPUs; on the CPU the ring where every node
// holds one rank (across hosts the ring is the fastest there, docs/launch-and-observe.md), else
// the hierarchical mode, whose steps inside a node read the peers' buffers through shared memory,
// where it can run, else ring.
AllReduceMode automatic_all_reduce_mode(const Topology& topology, const Device& device,
					const GroupAssignment& groups);

// Collective over the topology's world. `groups` (empty: all ranks in one group) is validated
// first: see validate_group_assignment. Buffers passed to run() must live on `device`.
std::unique_ptr<AllReduce> make_all_reduce(const Topology& topology, const Device& device, AllReduceMode mode,
					   const GroupAssignment& groups = {}, const AllReduceOptions& options = {});

} // namespace tower
