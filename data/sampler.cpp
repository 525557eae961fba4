// Which samples each rank trains on at each step: one shuffled global batch per step, cut into
// one contiguous shard per rank.
#include "data/sampler.h"

#include "data/shuffle.h"
#include "base/error.h"

namespace tower {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t batch, int rank, int world_size, uint64_t seed)
    : dataset_size_(dataset_size), batch_(batch), rank_(rank), world_size_(world_size), seed_(seed), steps_per_epoch_(0)
{
	if (batch <= 0)
		throw AgreedError(fmt::format("batch size {} must be positive", batch));
	if (world_size <= 0 || rank < 0 || rank >= world_size)
		throw AgreedError(fmt::format("rank {} is outside a world of {} ranks", rank, world_size));
	steps_per_epoch_ = dataset_size / global_batch();
	if (steps_per_epoch_ == 0)
		throw AgreedError(fmt::format("the dataset's {} samples are fewer than one global batch of {} x {} = {}; "
					      "use a smaller batch",
					      dataset_size, batch, world_size, global_batch()));
}

std::span<const int64_t> DistributedSampler::shard(int64_t epoch, int64_t step)
{
	if (epoch < 0 || step < 0 || step >= steps_per_epoch_)
		throw Error(fmt::format("sampler asked for epoch {} step {}; steps run 0..{}", epoch, step,
					steps_per_epoch_ - 1));
	if (epoch != cached_epoch_) {
		order_ = epoch_permutation(dataset_size_, seed_, epoch);
		cached_epoch_ = epoch;
	}
	const int64_t start = step * global_batch() + rank_ * batch_;
	return std::span<const int64_t>(order_).subspan(static_cast<size_t>(start), static_cast<size_t>(batch_));
}

} // namespace tower
