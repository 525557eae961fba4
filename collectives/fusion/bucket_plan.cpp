// Planning fused gradient buckets: which tensors share a buffer, at which aligned offsets.
#include "collectives/fusion/bucket_plan.h"

#include <map>

#include "base/error.h"

namespace tower {

namespace {

size_t align_up(size_t value, size_t alignment)
{
	return (value + alignment - 1) / alignment * alignment;
}

} // namespace

BucketPlan plan_buckets(const std::vector<TensorSpec>& specs, size_t threshold_bytes, size_t alignment_bytes)
{
	if (alignment_bytes < 8 || (alignment_bytes & (alignment_bytes - 1)) != 0)
		throw AgreedError(fmt::format("bucket alignment {} bytes is not a power of two of at least 8",
					      alignment_bytes));
	BucketPlan plan;
	std::map<DType, size_t> open; // dtype -> index of its open bucket in plan.buckets
	for (size_t i = specs.size(); i-- > 0;) {
		const TensorSpec& spec = specs[i];
		const size_t bytes = spec.bytes();
		auto it = open.find(spec.dtype);
		if (it != open.end()) {
			Bucket& bucket = plan.buckets[it->second];
			const size_t end = align_up(bucket.bytes, alignment_bytes) + bytes;
			if (threshold_bytes == 0 || end > threshold_bytes) {
				open.erase(it);
				it = open.end();
			}
		}
		if (it == open.end()) {
			plan.buckets.push_back(Bucket{spec.dtype, 0, {}});
			it = open.emplace(spec.dtype, plan.buckets.size() - 1).first;
		}
		Bucket& bucket = plan.buckets[it->second];
		const size_t offset = align_up(bucket.bytes, alignment_bytes);
		bucket.members.push_back({i, offset, bytes});
		bucket.bytes = offset + bytes;
	}
	for (Bucket& bucket : plan.buckets)
		bucket.bytes = align_up(bucket.bytes, alignment_bytes);
	return plan;
}

} // namespace tower
