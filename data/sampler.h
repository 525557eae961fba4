// Which samples each rank trains on at each step: one shuffled global batch per step, cut into
// one contiguous shard per rank.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tower {

// Step s of an epoch takes positions [s * B * W, (s + 1) * B * W) of that epoch's permutation
// (B the per-rank batch, W the world size), and rank r gets positions [r * B, (r + 1) * B) of
// it. The sequence of global batches depends only on (seed, epoch, B * W), so W ranks with
// batch B see the same samples per step as one rank with batch W * B. An incomplete last
// global batch is dropped.
class DistributedSampler {
public:
	// Bad arguments (non-positive batch, rank outside the world, a dataset smaller than one
	// global batch) throw tower::AgreedError: every rank passes the same ones.
	DistributedSampler(int64_t dataset_size, int64_t batch, int rank, int world_size, uint64_t seed);

	int64_t steps_per_epoch() const { return steps_per_epoch_; }
	int64_t batch() const { return batch_; }
	int64_t global_batch() const { return batch_ * world_size_; }

	// The dataset indices of this rank's shard of `step` in `epoch`. The span stays valid until
	// the next call for another epoch.
	std::span<const int64_t> shard(int64_t epoch, int64_t step);

private:
	int64_t dataset_size_;
	int64_t batch_;
	int rank_;
	int world_size_;
	uint64_t seed_;
	int64_t steps_per_epoch_;
	int64_t cached_epoch_ = -1;
	std::vector<int64_t> order_;
};

} // namespace tower
