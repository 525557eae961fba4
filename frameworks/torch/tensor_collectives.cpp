// Collectives on a PyTorch program's own CPU tensors (Horovod's allreduce, broadcast, allgather).
#include "frameworks/torch/tensor_collectives.h"

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/mpi/agree.h"
#include "collectives/tensor_collectives.h"
#include "frameworks/torch/process.h"
#include "frameworks/torch/torch_types.h"

namespace tower::torch_adapter {

namespace {

// What tower's collectives cannot take from torch, said on every rank before the call (the
// library then checks that every rank made the same call).
DType check_tensor(const at::Tensor& t)
{
	std::string problem;
	if (!t.device().is_cpu())
		problem = fmt::format("the tensor is on {}; tower.torch's collectives take CPU tensors here", t.device().str());
	else if (!tower_dtype(t.scalar_type()))
		problem = fmt::format("{} is not supported (float32, float64, float16, bfloat16, int32, int64)",
				      c10::toString(t.scalar_type()));
	agree(private_comm(), problem);
	return *tower_dtype(t.scalar_type());
}

// The memory of a contiguous CPU tensor, as tower sees it.
Tensor as_tower(const at::Tensor& t, DType dtype)
{
	return Tensor::view(t.data_ptr(), Shape(t.sizes().begin(), t.sizes().end()), dtype, Device{});
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
	const DType dtype = check_tensor(tensor);
	at::Tensor data = tensor.contiguous();
	tensor_collectives().all_reduce(as_tower(data, dtype), op, name);
	if (!data.is_same(tensor))
		tensor.copy_(data);
}

void broadcast_(const at::Tensor& tensor, int root, const std::string& name)
{
	const DType dtype = check_tensor(tensor);
	at::Tensor data = tensor.contiguous();
	tensor_collectives().broadcast(as_tower(data, dtype), root, name);
	if (!data.is_same(tensor))
		tensor.copy_(data);
}

at::Tensor allgather(const at::Tensor& tensor, const std::string& name)
{
	const DType dtype = check_tensor(tensor);
	const at::Tensor data = tensor.contiguous();
	Tensor gathered = tensor_collectives().all_gather(as_tower(data, dtype), name);
	const Shape& shape = gathered.shape();
	// A torch tensor of its own: tower's memory goes with `gathered`.
	return at::from_blob(gathered.data(), at::IntArrayRef(shape.data(), shape.size()), tensor.options()).clone();
}

void barrier()
{
	tensor_collectives().barrier();
}

} // namespace tower::torch_adapter
