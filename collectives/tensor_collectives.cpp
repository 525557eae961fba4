// Collectives on a program's own tensors, each call first checked to be the same call on every rank.
#include "collectives/tensor_collectives.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "base/mpi/agree.h"
#include "base/mpi/mpi_check.h"
#include "base/tensor/memory.h"
#include "collectives/transports/communicator.h"

namespace tower {

namespace {

// The call as every rank must make it; allgather's first dimension may differ, so it is left out.
std::string describe_call(const char* operation, const std::string& name, const Tensor& t, bool whole_shape,
			  const std::string& detail)
{
	const Shape& dims = t.shape();
	const std::string shape = whole_shape || dims.empty()
					  ? shape_text(dims)
					  : fmt::format("[*, {}]", fmt::join(dims.begin() + 1, dims.end(), ", "));
	const std::string quoted = name.empty() ? "" : fmt::format("'{}' ", name);
	return fmt::format("{}({}{}{}){}", operation, quoted, dtype_name(t.dtype()), shape,
			   detail.empty() ? "" : " " + detail);
}

} // namespace

TensorCollectives::TensorCollectives(MPI_Comm comm, const Device& device)
	: data_(make_communicator(comm, device)), device_(device)
{
	TOWER_MPI(MPI_Comm_dup(comm, &bookkeeping_));
}

TensorCollectives::~TensorCollectives()
{
	if (bookkeeping_ != MPI_COMM_NULL)
		MPI_Comm_free(&bookkeeping_);
}

int TensorCollectives::rank() const
{
	return data_->rank();
}

int TensorCollectives::size() const
{
	return data_->size();
}

void TensorCollectives::agree_on_call(const std::string& call, const Tensor& tensor, std::string problem)
{
	if (problem.empty() && !tensor.defined())
		problem = "the tensor has no memory";
	else if (problem.empty() && tensor.device().name() != device_.name())
		problem = fmt::format("the tensor is on {}, these collectives were made for {}", tensor.device().name(),
				      device_.name());
	agree(bookkeeping_, problem.empty() ? "" : call + ": " + problem);
	agree_on_fields(bookkeeping_, {{"the collective", call}},
			"collectives on a program's tensors are matched by the order of the calls, and these ranks made "
			"different calls");
}

void TensorCollectives::all_reduce(const Tensor& tensor, ReduceOp op, const std::string& name)
{
	agree_on_call(describe_call("allreduce", name, tensor, true, fmt::format("op={}", reduce_op_name(op))), tensor, "");
	data_->all_reduce(tensor.data(), tensor.data(), static_cast<size_t>(tensor.numel()), tensor.dtype(), op);
}

void TensorCollectives::broadcast(const Tensor& tensor, int root, const std::string& name)
{
	const std::string problem = root < 0 || root >= size()
					    ? fmt::format("root rank {} is outside the {} ranks [0, {})", root, size(), size())
					    : "";
	agree_on_call(describe_call("broadcast", name, tensor, true, fmt::format("root={}", root)), tensor, problem);
	data_->broadcast(tensor.data(), static_cast<size_t>(tensor.numel()), tensor.dtype(), root);
}

Tensor TensorCollectives::all_gather(const Tensor& tensor, const std::string& name)
{
	const std::string problem =
		tensor.shape().empty() ? "a tensor of no dimension (allgather concatenates along the first)" : "";
	agree_on_call(describe_call("allgather", name, tensor, false, ""), tensor, problem);
	// The first dimensions first, then every rank's rows padded to the longest.
	const int64_t mine = tensor.shape()[0];
	std::vector<int64_t> rows(static_cast<size_t>(size()));
	TOWER_MPI(MPI_Allgather(&mine, 1, MPI_INT64_T, rows.data(), 1, MPI_INT64_T, bookkeeping_));
	const int64_t longest = *std::max_element(rows.begin(), rows.end());
	Shape shape = tensor.shape();
	shape[0] = longest;
	Tensor padded = Tensor::zeros(shape, tensor.dtype(), device_);
	if (mine > 0)
		copy_bytes(padded.data(), device_, tensor.data(), device_, tensor.bytes());
	shape[0] = longest * size();
	Tensor gathered = Tensor::empty(shape, tensor.dtype(), device_);
	data_->all_gather(padded.data(), gathered.data(), static_cast<size_t>(padded.numel()), tensor.dtype());
	// Each rank's rows to the front, in rank order.
	int64_t total = 0;
	for (int64_t r : rows)
		total += r;
	shape[0] = total;
	Tensor out = Tensor::empty(shape, tensor.dtype(), device_);
	const size_t padded_bytes = padded.bytes();
	size_t at = 0;
	for (int r = 0; r < size(); ++r) {
		const size_t bytes = padded_bytes == 0 ? 0
							: padded_bytes / static_cast<size_t>(longest) *
								  static_cast<size_t>(rows[static_cast<size_t>(r)]);
		if (bytes > 0)
			copy_bytes(static_cast<char*>(out.data()) + at, device_,
				   static_cast<const char*>(gathered.data()) + static_cast<size_t>(r) * padded_bytes, device_, bytes);
		at += bytes;
	}
	return out;
}

void TensorCollectives::barrier()
{
	data_->barrier();
}

} // namespace tower
