// The replicated strategy's step engine: keeps every rank's tower in lock-step, one fused all-reduce at a time.
#include "runtime/strategies/replicated/replicated_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>

#include <fmt/ranges.h>

#include "collectives/broadcast_named.h"
#include "collectives/fusion/pack.h"
#include "collectives/signature_check.h"
#include "models/kernels/ops.h"
#include "base/error.h"
#include "base/device/gpu_runtime.h"
#include "base/device/stream.h"
#include "base/tensor/memory.h"
#include "base/mpi/agree.h"
#include "base/mpi/mpi_check.h"
#include "base/mpi/scalars.h"
#include "base/watchdog/watched_wait.h"
#include "runtime/safety/replica_check.h"
#include "runtime/strategies/replicated/sharded_update.h"
#include "runtime/observe/timeline.h"
#include "runtime/strategies/replicated/whole_update.h"
#include "base/clock.h"

namespace tower {

namespace {

// Offsets inside a bucket are aligned so each gradient starts on its own cache line (and on a
// GPU, on a boundary every kernel's vector loads accept).
constexpr size_t bucket_alignment = 256;

// The ranks of this rank's replica group (validated already by the all-reduce), in world order.
CommHandle replica_group_comm(const Topology& topology, const GroupAssignment& groups)
{
	int color = 0;
	for (size_t g = 0; g < groups.size(); ++g)
		for (int r : groups[g])
			if (r == topology.rank())
				color = static_cast<int>(g);
	MPI_Comm comm = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split(topology.world(), color, topology.rank(), &comm));
	return CommHandle(comm);
}

} // namespace

ReplicatedEngine::ReplicatedEngine(const Topology& topology, const Device& device, const ParameterSet& parameters,
				   Optimizer& optimizer, const ReplicatedEngineOptions& options)
	: topology_(topology), device_(device), optimizer_(optimizer), options_(options),
	  parameters_(parameters.parameters), compute_type_(parameters.compute_type)
{
	if (options_.compress != DType::f32 && options_.compress != DType::f16 && options_.compress != DType::bf16)
		throw AgreedError(fmt::format("`compress` {}: gradients travel as f32 (none), f16 or bf16",
					      dtype_name(options_.compress)));
	if (options_.fusion_mb < 0)
		throw AgreedError(fmt::format("`fusion_mb` {} is negative; use 0 to disable fusion or a size in MiB",
					      options_.fusion_mb));
	for (size_t i = 0; i < parameters_.size(); ++i)
		parameter_index_[parameters_[i]] = i;
	check_gradient_list(topology_.world(), parameters_);
	all_reduce_ = make_all_reduce(topology_, device_, options_.mode, options_.groups, options_.all_reduce);
	replica_comm_ = replica_group_comm(topology_, options_.groups);
	report_comm_ = duplicate_comm(topology_.world());
	bind_gradients_to_buckets();
	auto variables_to_sync = parameter_tensors();
	for (auto& s : optimizer_.state())
		variables_to_sync.push_back(s);
	broadcast_named(topology_, variables_to_sync, 0);
	// After the broadcast: a sharded update keeps one copy of the variables per node, made from
	// the node's first rank's, so the replicas must agree first.
	if (options_.shard_update && !device_.is_cuda() && compressed_storage_.empty() &&
	    ShardedUpdate::applies(*all_reduce_, plan_))
		update_ = std::make_unique<ShardedUpdate>(*all_reduce_, plan_, bucket_storage_, options_.reduce, parameters_,
							  optimizer_, compute_type_);
	else
		update_ = std::make_unique<WholeUpdate>(*all_reduce_, plan_, bucket_storage_, compressed_storage_, device_,
							options_.reduce, parameters_, optimizer_, options_.faults.reduce_alone);
	if (options_.overlap)
		start_comm_thread();
}

void ReplicatedEngine::start_comm_thread()
{
	if (device_.is_cuda()) {
		// The communication thread's casts, copies and collectives go to a stream of their own:
		// on the default stream they would queue behind the rest of backward. Each bucket's
		// marker orders them after the kernels that wrote its gradients, and after no others.
		comm_stream_ = std::make_unique<SideStream>(device_);
		for (size_t b = 0; b < plan_.buckets.size(); ++b)
			bucket_ready_.emplace_back(device_);
	}
	// CUDA's current device is per host thread: the communication thread's work must run on
	// this rank's GPU, not on device 0.
	comm_thread_ = std::make_unique<CommThread>([gpu = device_, stream = comm_stream_.get()] {
		if (gpu.is_cuda()) {
			select_gpu(gpu.index);
			stream->adopt_on_this_thread();
		}
	});
}

ReplicatedEngine::~ReplicatedEngine()
{
	// The gradients are views into the bucket storage, which goes with this object. Copying them
	// out allocates and copies on the device, which fails after a sticky CUDA error: then (and
	// while an exception unwinds, whose message is the one that matters) they are dropped instead,
	// so nothing points into freed memory and no second error hides the first.
	comm_thread_.reset();
	bool keep = std::uncaught_exceptions() == 0;
	for (Parameter* p : parameters_) {
		if (keep) {
			try {
				Tensor own = Tensor::empty(p->grad.shape(), p->grad.dtype(), p->grad.device());
				own.copy_from(p->grad);
				p->grad = own;
				continue;
			} catch (const std::exception& e) {
				std::fprintf(stderr, "tower: rank %d: the gradients could not be given memory of their "
					     "own (%s); they are dropped with the replicated engine\n",
					     topology_.rank(), e.what());
				keep = false;
			}
		}
		p->grad = Tensor();
	}
}

void ReplicatedEngine::bind_gradients_to_buckets()
{
	std::vector<TensorSpec> specs;
	for (const Parameter* p : parameters_)
		specs.push_back({p->name, p->grad.shape(), p->grad.dtype()});
	const auto threshold = static_cast<size_t>(options_.fusion_mb * 1024.0 * 1024.0);
	plan_ = plan_buckets(specs, threshold, bucket_alignment);

	bucket_of_parameter_.assign(parameters_.size(), 0);
	pending_in_bucket_.assign(plan_.buckets.size(), 0);
	reduce_intervals_.assign(plan_.buckets.size(), {});
	for (size_t b = 0; b < plan_.buckets.size(); ++b) {
		const Bucket& bucket = plan_.buckets[b];
		// On the CPU the storage lies in the all-reduce's shared window: no staging copies.
		bucket_storage_.push_back(make_bucket_storage(bucket, device_, *all_reduce_));
		if (options_.compress != DType::f32) {
			// Compressed, the lower-type copy is what travels, so it takes the shared window.
			Bucket low = bucket;
			low.dtype = options_.compress;
			low.bytes = bucket.count() * dtype_size(options_.compress);
			compressed_storage_.push_back(make_bucket_storage(low, device_, *all_reduce_));
		}
		const auto views = bucket_views(bucket, bucket_storage_.back(), specs);
		for (size_t m = 0; m < bucket.members.size(); ++m) {
			Parameter& p = *parameters_[bucket.members[m].tensor];
			// Keep what the gradient held (normally zeros) and let it live in the bucket from now
			// on: backward writes straight into the buffer that is all-reduced.
			Tensor view = views[m];
			view.copy_from(p.grad);
			p.grad = view;
			bucket_of_parameter_[bucket.members[m].tensor] = b;
		}
	}
}

std::vector<NamedTensor> ReplicatedEngine::parameter_tensors() const
{
	std::vector<NamedTensor> out;
	for (const Parameter* p : parameters_)
		out.push_back({p->name, p->value});
	return out;
}

std::vector<NamedTensor> ReplicatedEngine::variables() const
{
	auto out = parameter_tensors();
	for (auto& s : optimizer_.state())
		out.push_back(s);
	out.push_back({std::string(step_counter_name), global_step_});
	return out;
}

size_t ReplicatedEngine::bytes_per_step() const
{
	size_t total = 0;
	for (const Bucket& b : plan_.buckets)
		total += b.bytes;
	return total;
}

size_t ReplicatedEngine::bytes_moved_per_step() const
{
	if (compressed_storage_.empty())
		return bytes_per_step();
	size_t total = 0;
	for (const Tensor& low : compressed_storage_)
		total += low.bytes();
	return total;
}

void ReplicatedEngine::reduce_bucket(size_t b)
{
	// On a GPU the collective waits for the kernels that wrote its bucket: the interval starts
	// when they are done, so waiting for compute is not counted as hidden communication. On the
	// communication thread that is the bucket's marker (its stream waits for the marker, and the
	// host waits for it only to start the clock); without overlap, everything queued so far.
	if (bucket_ready_.empty()) {
		wait_thread_stream(device_);
	} else {
		bucket_ready_[b].make_thread_stream_wait();
		bucket_ready_[b].synchronize();
	}
	timeline::Span span("all-reduce", "comm");
	span.arg("bucket", static_cast<int64_t>(b))
		.arg("bytes", static_cast<int64_t>(compressed_storage_.empty() ? plan_.buckets[b].bytes
									    : compressed_storage_[b].bytes()))
		.arg("mode", all_reduce_mode_name(mode()));
	const WaitContext context("bucket", static_cast<int64_t>(b));
	const auto start = Clock::now();
	{
		// The main thread reads the bucket once every job is done, or failed: what this job
		// queued on the communication thread's stream (the widening cast) must be done by then.
		const SideStreamDrain drain(device_, !bucket_ready_.empty());
		update_->reduce(b);
	}
	reduce_intervals_[b] = {start, Clock::now()};
}

void ReplicatedEngine::on_gradient_ready(const Parameter& parameter)
{
	// A wrong report is kept for the end of the step, where every rank hears of it: thrown here,
	// it would leave the other ranks inside an all-reduce.
	const auto found = parameter_index_.find(&parameter);
	if (found == parameter_index_.end()) {
		report_problems_.push_back(fmt::format("'{}' was reported ready but is not one of this optimizer's "
						       "parameters", parameter.name));
		return;
	}
	if (reported_[found->second]) {
		report_problems_.push_back(fmt::format("'{}' was reported ready twice", parameter.name));
		return;
	}
	reported_[found->second] = true;
	poison_if_injecting(parameter);
	last_gradient_ready_ = Clock::now();
	--pending_in_bucket_[bucket_of_parameter_[found->second]];
	// Buckets leave in plan order on every rank, whatever order a program reports its gradients
	// in: the all-reduces of one communicator must be the same sequence everywhere. The models'
	// backward reports in the plan's order, so each bucket still leaves as soon as it is full.
	while (next_bucket_ < plan_.buckets.size() && pending_in_bucket_[next_bucket_] == 0)
		submit_next_bucket();
}

void ReplicatedEngine::submit_next_bucket()
{
	const size_t b = next_bucket_++;
	// Recorded on this thread's stream right after the kernels of the bucket's last gradient.
	if (!bucket_ready_.empty())
		bucket_ready_[b].record();
	comm_thread_->submit([this, b] { reduce_bucket(b); });
}

void ReplicatedEngine::wait_for_reported_buckets()
{
	std::vector<std::string> missing;
	for (size_t i = 0; i < parameters_.size(); ++i)
		if (!reported_[i])
			missing.push_back(fmt::format("'{}'", parameters_[i]->name));
	// A rank that missed a report still sends every bucket it owes, in order: the other ranks are
	// inside those all-reduces, and must come out of them to hear what went wrong.
	while (!missing.empty() && next_bucket_ < plan_.buckets.size())
		submit_next_bucket();
	std::vector<std::string> problems = report_problems_;
	if (!missing.empty())
		problems.push_back(fmt::format("the gradient of {} was never reported ready during the last backward pass",
					       fmt::join(missing, ", ")));
	{
		timeline::Span wait("wait for all-reduce", "wait");
		comm_thread_->wait_all();
	}
	const int64_t worst = all_reduce_scalar(report_comm_.get(), static_cast<int64_t>(problems.size()), MPI_MAX,
						"count of wrong gradient reports");
	if (worst > 0)
		agree(report_comm_.get(),
		      problems.empty() ? std::string()
				       : fmt::format("{}; call BackwardPass::on_ready once for every parameter, as soon as its "
						     "gradient is final", fmt::join(problems, "; ")));
}

void ReplicatedEngine::poison_if_injecting(const Parameter& parameter)
{
	if (poisoned_ || steps() != options_.faults.nonfinite_step || topology_.rank() != options_.faults.nonfinite_rank)
		return;
	const float nan = std::numeric_limits<float>::quiet_NaN();
	copy_bytes(parameter.grad.data(), parameter.grad.device(), &nan, Device{}, sizeof nan);
	poisoned_ = true;
}

GradReadyFn ReplicatedEngine::begin_final_backward()
{
	poisoned_ = false;
	final_backward_ = true;
	for (size_t b = 0; b < plan_.buckets.size(); ++b)
		pending_in_bucket_[b] = plan_.buckets[b].members.size();
	reported_.assign(parameters_.size(), false);
	report_problems_.clear();
	next_bucket_ = 0;
	backward_start_ = Clock::now();
	if (!comm_thread_)
		return {};
	return [this](const Parameter& p) { on_gradient_ready(p); };
}

StepStats ReplicatedEngine::step(const StepRequest& request)
{
	TOWER_CHECK(final_backward_, "step() without begin_final_backward() before the last backward pass: the "
		    "gradients were never reported");
	final_backward_ = false;
	StepStats stats;
	stats.micro_batches = request.micro_batches;
	// Communication before the last gradient was ready ran beside backward's compute; measuring
	// up to step() instead would count time the scheduler merely interleaved. On a GPU the last
	// gradient is reported when its kernel is queued, and the program waited for the kernels
	// before calling step(): that is the end.
	const auto backward_end = comm_thread_ && !device_.is_cuda() ? last_gradient_ready_ : Clock::now();

	if (comm_thread_) {
		wait_for_reported_buckets();
	} else {
		if (!parameters_.empty())
			poison_if_injecting(*parameters_.back());
		for (size_t b = 0; b < plan_.buckets.size(); ++b)
			reduce_bucket(b);
	}

	double hidden = 0;
	for (const Interval& i : reduce_intervals_) {
		stats.allreduce_s += seconds(i.end - i.start);
		const auto overlap_end = std::min(i.end, backward_end);
		if (overlap_end > i.start)
			hidden += seconds(overlap_end - std::max(i.start, backward_start_));
	}
	stats.hidden_fraction = stats.allreduce_s > 0 ? hidden / stats.allreduce_s : 0;
	stats.allreduce_bytes = bytes_moved_per_step();

	// The sum over micro-batches becomes their mean, and the loss scale comes off.
	const float factor = 1.0f / (static_cast<float>(request.micro_batches) * request.loss_scale);
	{
		timeline::Span span("optimizer step", "update");
		stats.skipped = !update_->finish(factor, request.lr, &stats.grad_norm);
	}
	++steps();
	return stats;
}

uint64_t ReplicatedEngine::check_replicas() const
{
	return check_replicas_of(replica_comm_.get(), parameter_tensors());
}

} // namespace tower
