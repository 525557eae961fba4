// Planning fused gradient buckets: which tensors share a buffer, at which aligned offsets.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/tensor/tensor.h"
#include "base/tensor/dtype.h"

namespace tower {

struct TensorSpec {
	std::string name;
	Shape shape;
	DType dtype = DType::f32;
	size_t bytes() const { return static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype); }
};

struct BucketMember {
	size_t tensor = 0; // index into the specs the plan was made from
	size_t offset = 0; // bytes from the start of the bucket, a multiple of the alignment
	size_t bytes = 0;
};

struct Bucket {
	DType dtype = DType::f32;
	size_t bytes = 0; // the whole bucket, padded to the alignment; padding stays zero
	std::vector<BucketMember> members;
	size_t count() const { return bytes / dtype_size(dtype); } // elements to all-reduce
};

struct BucketPlan {
	std::vector<Bucket> buckets; // in the order their gradients become ready
};

// Walks `specs` from last to first (the last layers finish backward first) and fills one open
// bucket per dtype; a bucket closes when the next tensor would take it past `threshold_bytes`
// (a tensor larger than the threshold gets a bucket of its own). A threshold of 0 disables
// fusion: one bucket per tensor. Offsets are multiples of `alignment_bytes`, which must be a
// power of two of at least 8 bytes; otherwise tower::AgreedError.
BucketPlan plan_buckets(const std::vector<TensorSpec>& specs, size_t threshold_bytes, size_t alignment_bytes);

} // namespace tower
