// Collectives on a program's own tensors (all-reduce, broadcast, all-gather), each call first
// checked to be the same call on every rank.
#pragma once

#include <memory>
#include <string>

#include <mpi.h>

#include "base/device/device.h"
#include "base/tensor/tensor.h"
#include "collectives/reduce_op.h"

namespace tower {

class Communicator;

// Every call is collective over the ranks of the communicator it was made with, which must make
// the same calls in the same order. Before moving data the ranks compare what each called
// (operation, name, element type, shape, op, root): a difference is a tower::AgreedError on
// every rank naming each rank's call, never a hang. Tensors live on the device given at
// construction, in any element type (f32, f64, f16, bf16, i32, i64).
class TensorCollectives {
public:
	// Collective over `comm`, which is duplicated (another thread may keep using it).
	TensorCollectives(MPI_Comm comm, const Device& device);
	~TensorCollectives();
	TensorCollectives(const TensorCollectives&) = delete;
	TensorCollectives& operator=(const TensorCollectives&) = delete;

	int rank() const;
	int size() const;

	// In place: `tensor` becomes the reduction over the ranks (sum, mean, max or min).
	void all_reduce(const Tensor& tensor, ReduceOp op, const std::string& name = "");
	// In place: root's values, on every rank.
	void broadcast(const Tensor& tensor, int root, const std::string& name = "");
	// Every rank's tensor concatenated along the first dimension, in rank order: a new tensor.
	// The first dimension may differ between ranks, the others may not.
	Tensor all_gather(const Tensor& tensor, const std::string& name = "");
	void barrier();

private:
	void agree_on_call(const std::string& call, const Tensor& tensor, std::string problem);

	std::unique_ptr<Communicator> data_;
	MPI_Comm bookkeeping_ = MPI_COMM_NULL; // the call checks and the all-gather's row counts
	Device device_;
};

} // namespace tower
