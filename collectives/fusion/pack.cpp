// Moving gradients into and out of their fused bucket, or letting them live inside it (view mode).
#include "collectives/fusion/pack.h"

#include <cstring>

#include "collectives/all_reduce.h"
#include "base/error.h"
#include "base/tensor/memory.h"

namespace tower {

namespace {

std::vector<CopyTask> member_copies(const Bucket& bucket, const std::vector<Tensor>& tensors, const Tensor& storage,
				    bool into_bucket)
{
	TOWER_CHECK_EQ(storage.bytes(), bucket.bytes, "bucket storage size");
	std::vector<CopyTask> tasks;
	tasks.reserve(bucket.members.size());
	for (const BucketMember& m : bucket.members) {
		TOWER_CHECK(m.tensor < tensors.size(), "bucket member {} but only {} tensors given", m.tensor, tensors.size());
		const Tensor& t = tensors[m.tensor];
		TOWER_CHECK_EQ(t.bytes(), m.bytes, fmt::format("bytes of tensor {}", m.tensor));
		TOWER_CHECK(t.device().kind == storage.device().kind, "tensor {} is on {} but its bucket on {}", m.tensor,
			    t.device().name(), storage.device().name());
		char* slot = storage.data_as<char>() + m.offset;
		if (into_bucket)
			tasks.push_back({slot, t.data(), m.bytes});
		else
			tasks.push_back({t.data(), slot, m.bytes});
	}
	return tasks;
}

} // namespace

void copy_batch(const std::vector<CopyTask>& tasks, const Device& device)
{
	if (device.is_cuda()) {
		copy_batch_device(tasks, device);
		return;
	}
	for (const CopyTask& task : tasks)
		if (task.bytes > 0 && task.dst != task.src)
			std::memcpy(task.dst, task.src, task.bytes);
}

Tensor make_bucket_storage(const Bucket& bucket, const Device& device)
{
	return Tensor::zeros({static_cast<int64_t>(bucket.count())}, bucket.dtype, device);
}

Tensor make_bucket_storage(const Bucket& bucket, const Device& device, AllReduce& all_reduce)
{
	if (device.is_cuda())
		return make_bucket_storage(bucket, device);
	void* data = all_reduce.allocate(bucket.bytes);
	zero_bytes(data, device, bucket.bytes);
	return Tensor::view(data, {static_cast<int64_t>(bucket.count())}, bucket.dtype, device);
}

std::vector<Tensor> bucket_views(const Bucket& bucket, const Tensor& storage, const std::vector<TensorSpec>& specs)
{
	TOWER_CHECK_EQ(storage.bytes(), bucket.bytes, "bucket storage size");
	std::vector<Tensor> views;
	views.reserve(bucket.members.size());
	for (const BucketMember& m : bucket.members)
		views.push_back(Tensor::view(storage.data_as<char>() + m.offset, specs.at(m.tensor).shape,
					     bucket.dtype, storage.device()));
	return views;
}

void pack_bucket(const Bucket& bucket, const std::vector<Tensor>& tensors, const Tensor& storage)
{
	copy_batch(member_copies(bucket, tensors, storage, true), storage.device());
}

void unpack_bucket(const Bucket& bucket, const Tensor& storage, const std::vector<Tensor>& tensors)
{
	copy_batch(member_copies(bucket, tensors, storage, false), storage.device());
}

} // namespace tower
