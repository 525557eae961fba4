// The optimizer step split across the replicas of one node: each rank reduces, checks and updates
// one shard of the gradients, parameters and optimizer state, in the node's one shared copy.
#include "runtime/strategies/replicated/sharded_update.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "models/kernels/ops.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

namespace {

// Shard boundaries fall on whole cache lines, so no two ranks write the same line of the copy.
constexpr size_t shard_alignment = 16; // f32 elements

Tensor owned_copy(const Tensor& view)
{
	Tensor own = Tensor::empty(view.shape(), view.dtype(), view.device());
	own.copy_from(view);
	return own;
}

} // namespace

bool ShardedUpdate::applies(AllReduce& all_reduce, const BucketPlan& plan)
{
	const NodeSharding* sharding = all_reduce.node_sharding();
	if (sharding == nullptr || sharding->node_size() < 2)
		return false;
	return std::all_of(plan.buckets.begin(), plan.buckets.end(), [](const Bucket& b) { return b.dtype == DType::f32; });
}

ShardedUpdate::ShardedUpdate(AllReduce& all_reduce, const BucketPlan& plan, const std::vector<Tensor>& gradients,
			     ReduceOp op, const std::vector<Parameter*>& parameters, Optimizer& optimizer,
			     DType working)
	: sharding_(*all_reduce.node_sharding()), plan_(plan), gradients_(gradients), op_(op),
	  parameters_(parameters), optimizer_(optimizer), working_(working)
{
	TOWER_CHECK(applies(all_reduce, plan), "a sharded update needs f32 buckets on a node of several ranks");
	TOWER_CHECK(working == DType::f32 || working == DType::f16 || working == DType::bf16,
		    "working copies are f16 or bf16 (f32 needs none), not {}", dtype_name(working));
	state_slots_ = parameters_.empty() ? 0 : optimizer_.parameter_state(0).size();
	for (size_t b = 0; b < plan_.buckets.size(); ++b) {
		const Bucket& bucket = plan_.buckets[b];
		node_copy_.emplace_back();
		for (size_t k = 0; k < 1 + state_slots_; ++k)
			node_copy_.back().push_back(Tensor::view(sharding_.allocate_node_copy(bucket.bytes),
								 {static_cast<int64_t>(bucket.count())}, DType::f32,
								 Device{}));
		if (working_ != DType::f32)
			working_copy_.push_back(Tensor::view(
				sharding_.allocate_node_copy(bucket.count() * dtype_size(working_)),
				{static_cast<int64_t>(bucket.count())}, working_, Device{}));
		reduced_squares_.push_back(0.0);
	}
	share();
}

ShardedUpdate::~ShardedUpdate()
{
	// The node's copy goes with the all-reduce; the model and the optimizer may outlive it.
	take_own();
}

std::vector<std::vector<Tensor*>> ShardedUpdate::member_tensors(size_t b)
{
	std::vector<std::vector<Tensor*>> out(1 + state_slots_);
	for (const BucketMember& m : plan_.buckets[b].members) {
		out[0].push_back(&parameters_[m.tensor]->value);
		const std::vector<Tensor*> state = optimizer_.parameter_state(m.tensor);
		for (size_t k = 0; k < state_slots_; ++k)
			out[1 + k].push_back(state.at(k));
	}
	return out;
}

void ShardedUpdate::share()
{
	const bool fills = sharding_.node_rank() == 0;
	for (size_t b = 0; b < plan_.buckets.size(); ++b) {
		const Bucket& bucket = plan_.buckets[b];
		const auto tensors = member_tensors(b);
		for (size_t k = 0; k < tensors.size(); ++k) {
			char* base = static_cast<char*>(node_copy_[b][k].data());
			if (fills) // the padding between members stays zero, which updates keep
				std::memset(base, 0, bucket.bytes);
			for (size_t m = 0; m < bucket.members.size(); ++m) {
				Tensor& t = *tensors[k][m];
				Tensor view = Tensor::view(base + bucket.members[m].offset, t.shape(), DType::f32, Device{});
				if (fills)
					view.copy_from(t);
				t = view;
			}
		}
		if (working_copy_.empty())
			continue;
		// The working copy has the bucket's layout at its own width: offsets in elements agree.
		char* low = static_cast<char*>(working_copy_[b].data());
		for (const BucketMember& m : bucket.members) {
			Parameter& p = *parameters_[m.tensor];
			p.working = Tensor::view(low + m.offset / sizeof(float) * dtype_size(working_), p.value.shape(),
						 working_, Device{});
		}
		if (fills)
			round_into_working(b, 0, bucket.count());
	}
	// Nobody reads the node's copy before it is whole.
	sharding_.node_barrier();
}

void ShardedUpdate::take_own()
{
	for (size_t i = 0; i < parameters_.size(); ++i) {
		parameters_[i]->working = Tensor(); // the layers round their own again
		parameters_[i]->value = owned_copy(parameters_[i]->value);
		for (Tensor* s : optimizer_.parameter_state(i))
			*s = owned_copy(*s);
	}
}

void ShardedUpdate::write_variables(const std::function<void(bool writes)>& write)
{
	sharding_.node_barrier(); // no rank still reads the copy
	if (sharding_.node_rank() == 0) {
		write(true);
		for (size_t b = 0; b < working_copy_.size(); ++b)
			round_into_working(b, 0, plan_.buckets[b].count());
	} else {
		write(false);
	}
	sharding_.node_barrier(); // nor reads it before it is written
}

void ShardedUpdate::with_own_variables(const std::function<void()>& body)
{
	// What node rank 0 wrote into the node's copy before the call is in every rank's own.
	sharding_.node_barrier();
	take_own();
	// Node rank 0 writes the node's copy again only once every rank has taken its own.
	sharding_.node_barrier();
	body();
	share();
}

Segment ShardedUpdate::shard_of(size_t b) const
{
	const size_t count = plan_.buckets[b].count();
	const size_t lines = (count + shard_alignment - 1) / shard_alignment;
	const Segment in_lines = segment_of(lines, static_cast<size_t>(sharding_.node_size()),
					    static_cast<size_t>(sharding_.node_rank()));
	const size_t start = std::min(in_lines.start * shard_alignment, count);
	const size_t end = std::min((in_lines.start + in_lines.length) * shard_alignment, count);
	return {start, end - start};
}

void ShardedUpdate::reduce(size_t b)
{
	// The squares are summed block by block while the reduced block is still in the cache; finish()
	// uses them when it has no factor to apply first.
	double squares = 0;
	float* grad = gradients_[b].data_as<float>();
	sharding_.reduce_shard(grad, plan_.buckets[b].count(), DType::f32, op_, shard_of(b),
			       [&](size_t first, size_t length) {
				       squares += sum_of_squares(Tensor::view(grad + first, {static_cast<int64_t>(length)},
									      DType::f32, Device{}));
			       });
	reduced_squares_.at(b) = squares;
}

bool ShardedUpdate::finish(float factor, float lr, double* grad_norm)
{
	double partial = 0;
	for (size_t b = 0; b < plan_.buckets.size(); ++b) {
		const Segment shard = shard_of(b);
		const Tensor mine = Tensor::view(gradients_[b].data_as<float>() + shard.start,
						 {static_cast<int64_t>(shard.length)}, DType::f32, Device{});
		if (factor == 1.0f) {
			partial += reduced_squares_[b];
			continue;
		}
		scale(mine, factor);
		partial += sum_of_squares(mine);
	}
	// Summed in node-rank order on every rank, so every rank reaches the same verdict. The
	// exchange also tells each rank that all shards are reduced and every backward is done: no
	// peer reads gradients or parameters after it, until the barrier below.
	std::vector<double> partials(static_cast<size_t>(sharding_.node_size()));
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallgather(&partial, 1, MPI_DOUBLE, partials.data(), 1, MPI_DOUBLE, sharding_.node_comm(), &request));
	wait_request(request, {"sharded update (gradient norm)", sharding_.node_comm()});
	double squares = 0;
	for (double p : partials)
		squares += p;
	*grad_norm = std::sqrt(squares);
	const bool finite = std::isfinite(squares);
	if (finite) {
		optimizer_.count_step();
		for (size_t b = 0; b < plan_.buckets.size(); ++b)
			update_shard(b, lr);
	}
	// The node's copy is whole again once every rank has updated its shards.
	sharding_.node_barrier();
	return finite;
}

void ShardedUpdate::update_shard(size_t b, float lr)
{
	const Segment shard = shard_of(b);
	UpdateRange range{node_copy_[b][0].data_as<float>() + shard.start,
			  gradients_[b].data_as<float>() + shard.start, {}, static_cast<int64_t>(shard.length)};
	for (size_t k = 0; k < state_slots_; ++k)
		range.state[k] = node_copy_[b][1 + k].data_as<float>() + shard.start;
	optimizer_.update_range(range, lr);
	// Rounding block by block while each was still in L2 measured no faster.
	if (!working_copy_.empty())
		round_into_working(b, shard.start, shard.length);
}

void ShardedUpdate::round_into_working(size_t b, size_t first, size_t length)
{
	const auto n = static_cast<int64_t>(length);
	char* low = static_cast<char*>(working_copy_[b].data()) + first * dtype_size(working_);
	ops_for(Device{}).cast(Tensor::view(node_copy_[b][0].data_as<float>() + first, {n}, DType::f32, Device{}),
			       Tensor::view(low, {n}, working_, Device{}), false);
}

} // namespace tower
