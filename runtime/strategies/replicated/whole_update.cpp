// The unsharded replicated update: all-reduce whole buckets, then every replica updates everything.
#include "runtime/strategies/replicated/whole_update.h"

#include <cmath>

#include "models/kernels/ops.h"

namespace tower {

WholeUpdate::WholeUpdate(AllReduce& all_reduce, const BucketPlan& plan, const std::vector<Tensor>& buckets,
			 const std::vector<Tensor>& compressed, const Device& device, ReduceOp op,
			 const std::vector<Parameter*>& parameters, Optimizer& optimizer, bool reduce_alone)
	: all_reduce_(all_reduce), plan_(plan), buckets_(buckets), compressed_(compressed), device_(device), op_(op),
	  parameters_(parameters), optimizer_(optimizer), reduce_alone_(reduce_alone),
	  optimizer_span_(device, "optimizer kernels", "update")
{
}

void WholeUpdate::reduce(size_t b)
{
	const Bucket& bucket = plan_.buckets[b];
	if (all_reduce_.group_size() == 1 && !reduce_alone_)
		return; // a group of one: the sum and the mean are the gradient itself
	if (compressed_.empty()) {
		all_reduce_.run_in_place(buckets_[b].data(), bucket.count(), bucket.dtype, op_);
		return;
	}
	// The transport alone is in the lower type: narrow, reduce, widen back.
	const Ops& ops = ops_for(device_);
	const Tensor& low = compressed_[b];
	ops.cast(buckets_[b], low, false);
	all_reduce_.run_in_place(low.data(), bucket.count(), low.dtype(), op_);
	ops.cast(low, buckets_[b], false);
}

bool WholeUpdate::finish(float factor, float lr, double* grad_norm)
{
	// One pass over the gradients gives both answers: squares of finite f32 values summed in f64
	// cannot overflow, so the sum is non-finite exactly when some gradient is inf or NaN. Every
	// rank holds the same reduced values, so every rank reaches the same verdict.
	if (factor != 1.0f)
		for (const Tensor& storage : buckets_)
			scale(storage, factor);
	// On a GPU, one read for every bucket.
	const double squares = sum_of_squares_all(buckets_);
	*grad_norm = std::sqrt(squares);
	if (!std::isfinite(squares))
		return false;
	// The read above waited for the stream, so the span starts on an idle GPU.
	optimizer_span_.begin();
	optimizer_.step(parameters_, lr);
	optimizer_span_.end();
	return true;
}

} // namespace tower
