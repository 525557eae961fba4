// The parameter-server transport through one host's shared memory: owners read the workers'
// gradients in place and workers copy the owners' new values straight out of the owners' models.
#include "runtime/strategies/parameter_server/ps_transport.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>
#include <limits>

#include "collectives/transports/shm_node.h"
#include "collectives/transports/shm_window.h"
#include "base/error.h"
#include "runtime/observe/timeline.h"

namespace tower {

namespace {

// Variables start on whole cache lines of the windows.
constexpr int64_t alignment = 16; // f32 elements

// The owner sums a block of its share over the workers while the block is still in L1/L2.
constexpr int64_t block_elements = 4096;

Tensor owned_copy(const Tensor& view)
{
	Tensor own = Tensor::empty(view.shape(), view.dtype(), view.device());
	own.copy_from(view);
	return own;
}

// Who sends what: every rank's model values, and every worker's model gradient, live in shared
// windows laid out in model order. After backward, the owners read their slices of every
// worker's gradient directly, sum them into a private share, and post their sum of squares in
// the node's mailboxes; the optimizer then updates the owner's slices in place, in its own model,
// which is the master copy; the workers copy every other owner's slices out of that owner's
// model into theirs. Nothing is packed, nothing goes through MPI.
//
// Step order and reuse: barrier "gradients ready" (every worker's gradient is final) -> owners
// read -> barrier "gradient norm" (no one reads gradients after it, so backward may write them
// again) -> owners update their slices -> barrier "values ready" -> workers copy. An owner
// writes its slices again only after the next step's "gradient norm" barrier, which every worker
// reaches after it has copied; writes outside a step wait for settle().
class ShmPsTransport final : public PsTransport {
public:
	ShmPsTransport(const Topology& topology, const PsShares& shares);
	~ShmPsTransport() override;

	const char* name() const override
	{
		return "reduce to owners, fetch from owners, through shared memory";
	}
	Tensor owned_value(const VariableSlice& s) override;
	Tensor owned_gradient(const VariableSlice& s) override;
	double push(float worker_factor, float owner_factor, bool poison) override;
	double sum_over_ranks(double partial) override;
	void publish(bool settle) override;
	void settle() override;
	size_t moved_bytes() const override;

private:
	void rebind(bool gradients);
	double reduce_slice(const VariableSlice& s, float owner_factor);
	float* in_window(const SharedWindow& window, int rank, const VariableSlice& s) const;

	PsShares shares_;
	const Placement& placement_;
	int rank_;
	int servers_; // the first ranks, which own variables and train on nothing
	int64_t total_ = 0; // elements in a window; before offsets_, whose initializer sets it
	std::vector<int64_t> offsets_; // of each variable in the windows (elements)
	ShmNode node_;
	SharedWindow values_;    // every rank's model values; an owner's own slices are the master copy
	SharedWindow gradients_; // every worker's model gradient
	std::vector<float> reduced_; // this owner's share of the summed gradient, in segment order
};

std::vector<int64_t> model_offsets(const std::vector<Parameter*>& parameters, int64_t* total)
{
	std::vector<int64_t> offsets;
	int64_t at = 0;
	for (const Parameter* p : parameters) {
		offsets.push_back(at);
		at += (p->value.numel() + alignment - 1) / alignment * alignment;
	}
	*total = at;
	return offsets;
}

ShmPsTransport::ShmPsTransport(const Topology& topology, const PsShares& shares)
	: shares_(shares), placement_(*shares.placement), rank_(topology.rank()),
	  servers_(topology.size() - shares.workers), offsets_(model_offsets(shares.parameters, &total_)),
	  node_(topology.world(), 0), values_(node_.comm(), static_cast<size_t>(total_) * sizeof(float)),
	  gradients_(node_.comm(), shares.worker ? static_cast<size_t>(total_) * sizeof(float) : 0)
{
	TOWER_CHECK(node_.size() == topology.size(), "the shared-memory parameter-server transport needs all {} ranks "
		    "on one host, but {} share this rank's memory", topology.size(), node_.size());
	rebind(false);
	if (shares_.worker)
		rebind(true);
	if (shares_.my_owner_index >= 0)
		reduced_.assign(static_cast<size_t>(placement_.owner_elements[static_cast<size_t>(shares_.my_owner_index)]),
				0.0f);
}

void ShmPsTransport::rebind(bool gradients)
{
	const SharedWindow& window = gradients ? gradients_ : values_;
	std::memset(window.mine(), 0, static_cast<size_t>(total_) * sizeof(float));
	for (size_t v = 0; v < shares_.parameters.size(); ++v) {
		Tensor& t = gradients ? shares_.parameters[v]->grad : shares_.parameters[v]->value;
		Tensor view = Tensor::view(reinterpret_cast<float*>(window.mine()) + offsets_[v], t.shape(), DType::f32,
					   Device{});
		view.copy_from(t);
		t = view;
	}
}

ShmPsTransport::~ShmPsTransport()
{
	// The windows go with the transport; the model outlives it. No worker may still be copying
	// from an owner's window when the windows are freed.
	if (std::uncaught_exceptions() == 0)
		settle();
	for (Parameter* p : shares_.parameters) {
		p->value = owned_copy(p->value);
		if (shares_.worker)
			p->grad = owned_copy(p->grad);
	}
}

float* ShmPsTransport::in_window(const SharedWindow& window, int rank, const VariableSlice& s) const
{
	return reinterpret_cast<float*>(window.base(rank)) + offsets_[s.variable] + s.offset;
}

Tensor ShmPsTransport::owned_value(const VariableSlice& s)
{
	return Tensor::view(in_window(values_, rank_, s), {s.count}, DType::f32, Device{});
}

Tensor ShmPsTransport::owned_gradient(const VariableSlice& s)
{
	return Tensor::view(reduced_.data() + s.segment_offset, {s.count}, DType::f32, Device{});
}

double ShmPsTransport::reduce_slice(const VariableSlice& s, float owner_factor)
{
	float* out = reduced_.data() + s.segment_offset;
	// Four partial sums of squares break the dependency chain; the owner alone sums its share, in
	// a fixed order, so the verdict does not depend on timing.
	double squares[4] = {0, 0, 0, 0};
	for (int64_t first = 0; first < s.count; first += block_elements) {
		const int64_t n = std::min(block_elements, s.count - first);
		float* o = out + first;
		std::memcpy(o, in_window(gradients_, servers_, s) + first, static_cast<size_t>(n) * sizeof(float));
		for (int w = servers_ + 1; w < node_.size(); ++w) {
			const float* g = in_window(gradients_, w, s) + first;
			for (int64_t i = 0; i < n; ++i)
				o[i] += g[i];
		}
		int64_t i = 0;
		for (; i + 4 <= n; i += 4)
			for (int k = 0; k < 4; ++k) {
				o[i + k] *= owner_factor;
				squares[k] += static_cast<double>(o[i + k]) * static_cast<double>(o[i + k]);
			}
		for (; i < n; ++i) {
			o[i] *= owner_factor;
			squares[0] += static_cast<double>(o[i]) * static_cast<double>(o[i]);
		}
	}
	return (squares[0] + squares[1]) + (squares[2] + squares[3]);
}

double ShmPsTransport::push(float worker_factor, float owner_factor, bool poison)
{
	timeline::Span span("push", "comm");
	// A worker offers its whole gradient; a dedicated server reads its share of every worker's.
	const auto offered = shares_.worker ? static_cast<size_t>(total_) : reduced_.size() * static_cast<size_t>(shares_.workers);
	span.arg("bytes", static_cast<int64_t>(offered * sizeof(float))).arg("dtype", "f32");
	if (shares_.worker) {
		// The micro-batches' sum becomes their mean in place: backward overwrites it next step.
		float* mine = reinterpret_cast<float*>(gradients_.mine());
		if (worker_factor != 1.0f)
			for (int64_t i = 0; i < total_; ++i)
				mine[i] *= worker_factor;
		if (poison)
			mine[0] = std::numeric_limits<float>::quiet_NaN();
	}
	node_.barrier("parameter server: gradients ready (shared memory)");
	double squares = 0;
	for (const VariableSlice& s : placement_.slices)
		if (s.owner == shares_.my_owner_index)
			squares += reduce_slice(s, owner_factor);
	// A dedicated server contributes no gradient: its injected non-finite value lands in its share.
	if (poison && !shares_.worker && !reduced_.empty()) {
		reduced_[0] = std::numeric_limits<float>::quiet_NaN();
		squares = std::numeric_limits<double>::quiet_NaN();
	}
	return squares;
}

double ShmPsTransport::sum_over_ranks(double partial)
{
	node_.mailbox(rank_)[0] = std::bit_cast<uint64_t>(partial);
	// After this barrier no rank reads a gradient window again this step.
	node_.barrier("parameter server: gradient norm (shared memory)");
	double total = 0;
	for (int r = 0; r < node_.size(); ++r)
		total += std::bit_cast<double>(node_.mailbox(r)[0]);
	return total;
}

void ShmPsTransport::publish(bool settle_after)
{
	timeline::Span span(shares_.my_owner_index < 0 ? "fetch" : "publish", "comm");
	span.arg("bytes", static_cast<int64_t>(total_ * static_cast<int64_t>(sizeof(float))));
	node_.barrier("parameter server: values ready (shared memory)");
	if (shares_.worker)
		for (const VariableSlice& s : placement_.slices) {
			const int owner = placement_.owners[static_cast<size_t>(s.owner)];
			if (owner != rank_)
				std::memcpy(in_window(values_, rank_, s), in_window(values_, owner, s),
					    static_cast<size_t>(s.count) * sizeof(float));
		}
	if (settle_after)
		settle();
}

void ShmPsTransport::settle()
{
	node_.barrier("parameter server: values copied (shared memory)");
}

size_t ShmPsTransport::moved_bytes() const
{
	// What crosses between processes: each owner reads its share of every other worker's gradient,
	// and every other worker copies the owner's values.
	size_t total = 0;
	for (size_t o = 0; o < placement_.owners.size(); ++o) {
		const auto e = static_cast<size_t>(placement_.owner_elements[o]) * sizeof(float);
		const auto others = static_cast<size_t>(shares_.workers - (placement_.owners[o] >= servers_ ? 1 : 0));
		total += 2 * e * others;
	}
	return total;
}

} // namespace

bool shm_ps_transport_applies(const Topology& topology, const Device& device, DType compress)
{
	return topology.node_count() == 1 && topology.node_shares_memory() && !device.is_cuda() && compress == DType::f32;
}

std::unique_ptr<PsTransport> make_shm_ps_transport(const Topology& topology, const PsShares& shares)
{
	return std::make_unique<ShmPsTransport>(topology, shares);
}

} // namespace tower
