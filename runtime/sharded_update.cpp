// The optimizer step split across the replicas of one node: each rank reduces, checks and updates
// one shard of the gradients, parameters and optimizer state, and writes it into every replica.
#include "runtime/sharded_update.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "models/ops.h"
#include "runtime/base/error.h"
#include "runtime/base/mpi_check.h"
#include "runtime/base/watched_wait.h"

namespace tower {

namespace {

// Shard boundaries fall on whole cache lines, so no two ranks write the same line of a replica.
constexpr size_t shard_alignment = 16; // f32 elements

// The update works through a shard in blocks whose results are still in L2 when they are copied
// into the other replicas.
constexpr size_t update_block_elements = size_t{16} << 10;

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
			     ReduceOp op, const std::vector<Parameter*>& parameters, Optimizer& optimizer)
	: all_reduce_(all_reduce), sharding_(*all_reduce.node_sharding()), plan_(plan), gradients_(gradients), op_(op),
	  parameters_(parameters), optimizer_(optimizer)
{
	TOWER_CHECK(applies(all_reduce, plan), "a sharded update needs f32 buckets on a node of several ranks");
	const size_t slots = parameters_.empty() ? 0 : optimizer_.parameter_state(0).size();
	for (size_t b = 0; b < plan_.buckets.size(); ++b) {
		std::vector<Tensor*> values;
		for (const BucketMember& m : plan_.buckets[b].members)
			values.push_back(&parameters_[m.tensor]->value);
		values_.push_back(move_into_bucket_layout(b, values));
		reduced_squares_.push_back(0.0);
		states_.emplace_back();
		for (size_t k = 0; k < slots; ++k) {
			std::vector<Tensor*> state;
			for (const BucketMember& m : plan_.buckets[b].members)
				state.push_back(optimizer_.parameter_state(m.tensor).at(k));
			states_.back().push_back(move_into_bucket_layout(b, state));
		}
	}
}

ShardedUpdate::~ShardedUpdate()
{
	// The shared memory goes with the all-reduce; the model and the optimizer may outlive it.
	for (size_t i = 0; i < parameters_.size(); ++i) {
		parameters_[i]->value = owned_copy(parameters_[i]->value);
		for (Tensor* s : optimizer_.parameter_state(i))
			*s = owned_copy(*s);
	}
}

Tensor ShardedUpdate::move_into_bucket_layout(size_t b, const std::vector<Tensor*>& tensors)
{
	const Bucket& bucket = plan_.buckets[b];
	void* data = all_reduce_.allocate(bucket.bytes);
	std::memset(data, 0, bucket.bytes); // the padding between members stays zero, which updates keep
	const Tensor storage = Tensor::view(data, {static_cast<int64_t>(bucket.count())}, DType::f32, Device{});
	for (size_t m = 0; m < bucket.members.size(); ++m) {
		Tensor& t = *tensors[m];
		Tensor view = Tensor::view(static_cast<char*>(data) + bucket.members[m].offset, t.shape(), DType::f32, Device{});
		view.copy_from(t);
		t = view;
	}
	return storage;
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
	// exchange also tells each rank that all shards are reduced: no peer reads gradients after it.
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
		for (size_t b = 0; b < plan_.buckets.size(); ++b) {
			const Segment shard = shard_of(b);
			for (size_t first = shard.start; first < shard.start + shard.length; first += update_block_elements)
				update_block(b, first, std::min(update_block_elements, shard.start + shard.length - first), lr);
		}
	}
	// Every replica is whole again once every rank has written its shards.
	sharding_.node_barrier();
	return finite;
}

void ShardedUpdate::update_block(size_t b, size_t first, size_t length, float lr)
{
	UpdateRange range{values_[b].data_as<float>() + first, gradients_[b].data_as<float>() + first, {},
			  static_cast<int64_t>(length)};
	for (size_t k = 0; k < states_[b].size(); ++k)
		range.state[k] = states_[b][k].data_as<float>() + first;
	optimizer_.update_range(range, lr);
	auto copy_to_peers = [&](const float* mine) {
		for (int r = 0; r < sharding_.node_size(); ++r)
			if (r != sharding_.node_rank())
				std::memcpy(sharding_.peer_address(mine, r), mine, length * sizeof(float));
	};
	copy_to_peers(range.value);
	for (size_t k = 0; k < states_[b].size(); ++k)
		copy_to_peers(range.state[k]);
}

} // namespace tower
