// Collectives on a PyTorch program's own CPU tensors (Horovod's allreduce, broadcast, allgather).
#include "frameworks/torch/tensor_collectives.h"

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "base/mpi/agree.h"
#include "collectives/transports/communicator.h"
#include "frameworks/torch/process.h"
#include "frameworks/torch/torch_types.h"

namespace tower::torch_adapter {

namespace {

// The call as every rank must make it; `dims` leaves out the first dimension for allgather.
std::string describe_call(const char* operation, const std::string& name, const at::Tensor& t, bool whole_shape,
			  const std::string& detail)
{
	std::vector<int64_t> dims(t.sizes().begin(), t.sizes().end());
	std::string shape = whole_shape || dims.empty() ? fmt::format("[{}]", fmt::join(dims, ", "))
						      : fmt::format("[*, {}]", fmt::join(dims.begin() + 1, dims.end(), ", "));
	return fmt::format("{}({}{}{} {}{})", operation, name.empty() ? "" : "'", name, name.empty() ? "" : "'",
			   c10::toString(t.scalar_type()), shape) +
	       (detail.empty() ? "" : " " + detail);
}

// Checks this rank's tensor, then that every rank made the same call; throws AgreedError on
// every rank otherwise.
DType agree_on_call(const std::string& call, const at::Tensor& t, std::string problem = "")
{
	if (!problem.empty())
		problem = call + ": " + problem;
	else if (!t.device().is_cpu())
		problem = fmt::format("{}: the tensor is on {}; tower.torch's collectives take CPU tensors here",
				      call, t.device().str());
	else if (!tower_dtype(t.scalar_type()))
		problem = fmt::format("{}: {} is not supported (float32, float64, float16, bfloat16, int32, int64)", call,
				      c10::toString(t.scalar_type()));
	agree(private_comm(), problem);
	agree_on_fields(private_comm(), {{"the collective", call}},
			"tower.torch collectives are matched by the order of the calls, and these ranks made different calls");
	return *tower_dtype(t.scalar_type());
}

} // namespace

at::Tensor allreduce(const at::Tensor& tensor, ReduceOp op, const std::string& name)
{
	at::Tensor out = tensor.contiguous().clone();
	allreduce_(out, op, name);
	return out;
}

void allreduce_(const at::Tensor& tensor, ReduceOp op, const std::string& name)
{
	const DType dtype = agree_on_call(describe_call("allreduce", name, tensor, true,
							fmt::format("op={}", reduce_op_name(op))), tensor);
	at::Tensor data = tensor.contiguous();
	host_communicator().all_reduce(data.data_ptr(), data.data_ptr(), static_cast<size_t>(data.numel()), dtype, op);
	if (!data.is_same(tensor))
		tensor.copy_(data);
}

void broadcast_(const at::Tensor& tensor, int root, const std::string& name)
{
	const int size = topology().size();
	const std::string problem =
		root < 0 || root >= size ? fmt::format("root rank {} is outside the {} ranks [0, {})", root, size, size) : "";
	const DType dtype =
		agree_on_call(describe_call("broadcast", name, tensor, true, fmt::format("root={}", root)), tensor, problem);
	at::Tensor data = tensor.contiguous();
	host_communicator().broadcast(data.data_ptr(), static_cast<size_t>(data.numel()), dtype, root);
	if (!data.is_same(tensor))
		tensor.copy_(data);
}

at::Tensor allgather(const at::Tensor& tensor, const std::string& name)
{
	const std::string problem =
		tensor.dim() == 0 ? "a tensor of no dimension (allgather concatenates along the first)" : "";
	const DType dtype = agree_on_call(describe_call("allgather", name, tensor, false, ""), tensor, problem);
	Communicator& comm = host_communicator();
	const int size = comm.size();
	// The first dimensions first, then every rank's rows padded to the longest.
	const int64_t mine = tensor.size(0);
	std::vector<int64_t> rows(static_cast<size_t>(size));
	comm.all_gather(&mine, rows.data(), 1, DType::i64);
	int64_t longest = 0;
	for (int64_t r : rows)
		longest = std::max(longest, r);
	std::vector<int64_t> shape(tensor.sizes().begin(), tensor.sizes().end());
	int64_t row_elements = 1;
	for (size_t d = 1; d < shape.size(); ++d)
		row_elements *= shape[d];
	shape[0] = longest;
	at::Tensor padded = at::zeros(shape, tensor.options());
	if (mine > 0)
		padded.narrow(0, 0, mine).copy_(tensor);
	shape[0] = longest * size;
	at::Tensor gathered = at::empty(shape, tensor.options());
	comm.all_gather(padded.data_ptr(), gathered.data_ptr(), static_cast<size_t>(longest * row_elements), dtype);
	std::vector<at::Tensor> parts;
	for (int r = 0; r < size; ++r)
		parts.push_back(gathered.narrow(0, r * longest, rows[static_cast<size_t>(r)]));
	return at::cat(parts, 0);
}

void barrier()
{
	host_communicator().barrier();
}

} // namespace tower::torch_adapter
