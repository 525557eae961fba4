// The unsharded replicated update: all-reduce whole buckets, then every replica updates everything.
#pragma once

#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/fusion/bucket_plan.h"
#include "optim/optimizer.h"
#include "base/device/device.h"
#include "runtime/observe/device_span.h"
#include "runtime/strategies/replicated/gradient_update.h"

namespace tower {

class WholeUpdate final : public GradientUpdate {
public:
	// `buckets` hold the gradients; `compressed`, when not empty, a 16-bit twin of each bucket
	// that travels instead. With `reduce_alone`, a group of one runs the collective too (see
	// FaultInjection::reduce_alone). Everything passed must outlive this object.
	WholeUpdate(AllReduce& all_reduce, const BucketPlan& plan, const std::vector<Tensor>& buckets,
		    const std::vector<Tensor>& compressed, const Device& device, ReduceOp op,
		    const std::vector<Parameter*>& parameters, Optimizer& optimizer, bool reduce_alone = false);

	void reduce(size_t b) override;
	bool finish(float factor, float lr, double* grad_norm) override;
	bool is_sharded() const override { return false; }

private:
	AllReduce& all_reduce_;
	const BucketPlan& plan_;
	const std::vector<Tensor>& buckets_;
	const std::vector<Tensor>& compressed_;
	Device device_;
	ReduceOp op_;
	const std::vector<Parameter*>& parameters_;
	Optimizer& optimizer_;
	bool reduce_alone_;
	// The optimizer's kernels on the GPU's clock: its host span ends once they are queued.
	timeline::DeviceSpan optimizer_span_;
};

} // namespace tower
