// Moving gradients into and out of their fused bucket, or letting them live inside it (view mode).
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/fusion/bucket_plan.h"
#include "base/tensor/tensor.h"

namespace tower {

class AllReduce;

struct CopyTask {
	void* dst = nullptr;
	const void* src = nullptr;
	size_t bytes = 0;
};

// Runs every copy on `device`: plain memcpy loops on the CPU; on a GPU, one kernel launch per 128
// copies, queued on this thread's stream (base/device/stream.h) without waiting: what is queued
// there later sees the copies, and copy_bytes back to the host waits for them.
void copy_batch(const std::vector<CopyTask>& tasks, const Device& device);

// The GPU half of copy_batch; a build without CUDA throws tower::Error.
void copy_batch_device(const std::vector<CopyTask>& tasks, const Device& device);

// A zero-filled 1-D tensor of bucket.count() elements on `device`: the bucket's storage.
Tensor make_bucket_storage(const Bucket& bucket, const Device& device);
// The same, but on the CPU from all_reduce.allocate(), so run() on it can take the direct
// shared-memory path; collective over the all-reduce's group. The tensor borrows memory that
// `all_reduce` owns and must not outlive it. On a GPU this is the overload above.
Tensor make_bucket_storage(const Bucket& bucket, const Device& device, AllReduce& all_reduce);

// View mode: one tensor per member (same order as bucket.members) that borrows its place inside
// `storage`, shaped as in `specs`. Gradients bound to these need no packing at all.
std::vector<Tensor> bucket_views(const Bucket& bucket, const Tensor& storage, const std::vector<TensorSpec>& specs);

// Copy mode: `tensors` is indexed like the specs of the plan (only members are touched); each
// must match its member's bytes and live on the storage's device.
void pack_bucket(const Bucket& bucket, const std::vector<Tensor>& tensors, const Tensor& storage);
void unpack_bucket(const Bucket& bucket, const Tensor& storage, const std::vector<Tensor>& tensors);

} // namespace tower
