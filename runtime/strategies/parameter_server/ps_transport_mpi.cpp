// The parameter-server transport over MPI collectives: gradients reduced to each owner, values
// broadcast from it, for jobs that span hosts or send 16-bit gradients.
#include "runtime/strategies/parameter_server/ps_transport.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "collectives/transports/mpi_reduce_ops.h"
#include "collectives/signature_check.h"
#include "models/kernels/ops.h"
#include "base/watchdog/collective_debug.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"
#include "runtime/observe/timeline.h"
#include "base/mpi/scalars.h"

namespace tower {

namespace {

// Calls `piece(offset, count)` over [0, count) in pieces MPI's int counts can carry.
template <typename Fn> void in_pieces(int64_t count, DType dtype, Fn piece)
{
	const auto most = static_cast<int64_t>(mpi_max_count(dtype));
	for (int64_t at = 0; at < count; at += most)
		piece(at, static_cast<int>(std::min(most, count - at)));
}

// Who sends what: every worker packs its gradient owner by owner (one fused message per owner, in
// the transport type) and reduces it to that owner; each owner broadcasts its new values to the
// workers, which unpack them into their models.
class MpiPsTransport final : public PsTransport {
public:
	MpiPsTransport(const Topology& topology, const PsShares& shares);

	const char* name() const override { return "reduce to owners, broadcast from owners"; }
	Tensor owned_value(const VariableSlice& s) override { return buffer_slice(values_, s); }
	Tensor owned_gradient(const VariableSlice& s) override { return buffer_slice(gradients_, s); }
	double push(float worker_factor, float owner_factor, bool poison) override;
	double sum_over_ranks(double partial) override;
	void publish(bool settle) override;
	// A broadcast has finished with the owner's buffer before it returns.
	void settle() override {}
	size_t moved_bytes() const override;

private:
	// One owner and the ranks it serves: the workers, plus itself when it is a dedicated server.
	struct Channel {
		int owner = 0;        // world rank
		CommHandle comm;      // null on ranks outside it
		MPI_Comm raw = MPI_COMM_NULL;
		int root = 0;         // the owner's rank in comm
		int64_t offset = 0;   // of its segment in the owner-major buffers (elements)
		int64_t count = 0;
	};

	void make_channels(const Topology& topology);
	void pack_gradients(float factor);
	void reduce_to_owners();
	Tensor model_slice(const VariableSlice& s, bool gradient) const;
	Tensor buffer_slice(std::vector<float>& buffer, const VariableSlice& s) const;
	// Where owner o's segment starts in this rank's owner-major buffers.
	int64_t segment_base(int owner_index) const;

	int rank_;
	MPI_Comm world_;
	PsShares shares_;
	const Placement& placement_;
	std::vector<Channel> channels_;
	MpiReduceOps reduce_ops_;
	// Owner-major buffers: owner o's slices at channels_[o].offset, in placement order. A worker
	// holds all of them; a dedicated server only its own segment, at offset 0.
	// An owner's segment of gradients_ is reduced in place: it ends the reduction holding the sum.
	std::vector<float> gradients_;     // packed gradients, then an owner's reduced share
	std::vector<uint16_t> compressed_; // the same in the 16-bit transport type, when compressing
	std::vector<float> values_;        // the owners' variables; an owner's own segment is the master copy
};

MpiPsTransport::MpiPsTransport(const Topology& topology, const PsShares& shares)
	: rank_(topology.rank()), world_(topology.world()), shares_(shares), placement_(*shares.placement)
{
	make_channels(topology);
	const int64_t held = shares_.worker ? channels_.back().offset + channels_.back().count
					    : placement_.owner_elements[static_cast<size_t>(shares_.my_owner_index)];
	gradients_.assign(static_cast<size_t>(held), 0.0f);
	values_.assign(static_cast<size_t>(held), 0.0f);
	if (shares_.compress != DType::f32)
		compressed_.assign(static_cast<size_t>(held), 0);
	// Every rank built the model from the same seed, but the owner's copy is the one that counts:
	// publish() sends it to every worker.
	for (const VariableSlice& s : placement_.slices)
		if (s.owner == shares_.my_owner_index)
			buffer_slice(values_, s).copy_from(model_slice(s, false));
}

void MpiPsTransport::make_channels(const Topology& topology)
{
	int64_t offset = 0;
	for (size_t o = 0; o < placement_.owners.size(); ++o) {
		Channel c;
		c.owner = placement_.owners[o];
		c.offset = offset;
		c.count = placement_.owner_elements[o];
		offset += c.count;
		// The owner first, so it is rank 0 of its channel; dedicated servers stay out of the others.
		const bool member = shares_.worker || rank_ == c.owner;
		MPI_Comm comm = MPI_COMM_NULL;
		TOWER_MPI(MPI_Comm_split(topology.world(), member ? 0 : MPI_UNDEFINED, rank_ == c.owner ? -1 : rank_, &comm));
		c.comm = CommHandle(comm);
		c.raw = comm;
		c.root = 0;
		channels_.push_back(std::move(c));
	}
}

int64_t MpiPsTransport::segment_base(int owner_index) const
{
	return shares_.worker ? channels_[static_cast<size_t>(owner_index)].offset : 0;
}

Tensor MpiPsTransport::model_slice(const VariableSlice& s, bool gradient) const
{
	const Parameter& p = *shares_.parameters[s.variable];
	const Tensor& whole = gradient ? p.grad : p.value;
	char* at = static_cast<char*>(whole.data()) + static_cast<size_t>(s.offset) * sizeof(float);
	return Tensor::view(at, {s.count}, DType::f32, whole.device());
}

Tensor MpiPsTransport::buffer_slice(std::vector<float>& buffer, const VariableSlice& s) const
{
	float* at = buffer.data() + segment_base(s.owner) + s.segment_offset;
	return Tensor::view(at, {s.count}, DType::f32, Device{});
}

void MpiPsTransport::pack_gradients(float factor)
{
	for (const VariableSlice& s : placement_.slices)
		buffer_slice(gradients_, s).copy_from(model_slice(s, true));
	if (factor != 1.0f)
		for (float& g : gradients_)
			g *= factor;
}

double MpiPsTransport::push(float worker_factor, float owner_factor, bool poison)
{
	if (shares_.worker)
		pack_gradients(worker_factor);
	else
		std::fill(gradients_.begin(), gradients_.end(), 0.0f);
	if (poison && !gradients_.empty())
		gradients_[0] = std::numeric_limits<float>::quiet_NaN();
	reduce_to_owners();
	// Squares of finite f32 values summed in f64 cannot overflow: the global sum is non-finite
	// exactly when some reduced gradient is inf or NaN.
	double squares = 0;
	if (shares_.my_owner_index >= 0) {
		const auto& c = channels_[static_cast<size_t>(shares_.my_owner_index)];
		float* share = gradients_.data() + segment_base(shares_.my_owner_index);
		for (int64_t i = 0; i < c.count; ++i) {
			share[i] *= owner_factor;
			squares += static_cast<double>(share[i]) * static_cast<double>(share[i]);
		}
	}
	return squares;
}

void MpiPsTransport::reduce_to_owners()
{
	const DType type = shares_.compress;
	const bool narrow = type != DType::f32;
	timeline::Span span("push", "comm");
	span.arg("bytes", static_cast<int64_t>(gradients_.size() * dtype_size(type))).arg("dtype", dtype_name(type));
	if (narrow)
		cpu_ops().cast(Tensor::view(gradients_.data(), {static_cast<int64_t>(gradients_.size())}, DType::f32, Device{}),
			       Tensor::view(compressed_.data(), {static_cast<int64_t>(compressed_.size())}, type, Device{}),
			       false);
	const MPI_Datatype datatype = mpi_datatype(type);
	const MPI_Op op = reduce_ops_.get(type, ReduceOp::sum);
	for (size_t o = 0; o < channels_.size(); ++o) {
		const Channel& c = channels_[o];
		if (c.raw == MPI_COMM_NULL)
			continue;
		const int64_t base = segment_base(static_cast<int>(o));
		char* segment = narrow ? reinterpret_cast<char*>(compressed_.data() + base)
				       : reinterpret_cast<char*>(gradients_.data() + base);
		const bool root = rank_ == c.owner;
		check_collective(c.raw, {"reduce to owner", static_cast<size_t>(c.count) * dtype_size(type), type, c.root});
		in_pieces(c.count, type, [&](int64_t at, int n) {
			char* piece = segment + static_cast<size_t>(at) * dtype_size(type);
			// The owner's own contribution (zeros on a dedicated server) is already in place.
			MPI_Request request = MPI_REQUEST_NULL;
			TOWER_MPI(MPI_Ireduce(root ? MPI_IN_PLACE : piece, root ? piece : nullptr, n, datatype, op, c.root,
					      c.raw, &request));
			wait_request(request, {"parameter server: gradients to owner", c.raw, -1, "owner", static_cast<int64_t>(o)});
		});
	}
	if (narrow && shares_.my_owner_index >= 0) {
		const int64_t base = segment_base(shares_.my_owner_index);
		const int64_t count = channels_[static_cast<size_t>(shares_.my_owner_index)].count;
		cpu_ops().cast(Tensor::view(compressed_.data() + base, {count}, type, Device{}),
			       Tensor::view(gradients_.data() + base, {count}, DType::f32, Device{}), false);
	}
}

double MpiPsTransport::sum_over_ranks(double partial)
{
	check_collective(world_, {"gradient norm all-reduce", sizeof partial, DType::f64});
	return all_reduce_scalar(world_, partial, MPI_SUM, "parameter server: gradient norm");
}

void MpiPsTransport::publish(bool /*settle*/)
{
	// A rank that owns nothing only receives: its side of the broadcast is a fetch.
	timeline::Span span(shares_.my_owner_index < 0 ? "fetch" : "publish", "comm");
	span.arg("bytes", static_cast<int64_t>(values_.size() * sizeof(float)));
	for (size_t o = 0; o < channels_.size(); ++o) {
		const Channel& c = channels_[o];
		if (c.raw == MPI_COMM_NULL)
			continue;
		float* segment = values_.data() + segment_base(static_cast<int>(o));
		check_collective(c.raw, {"owner broadcast", static_cast<size_t>(c.count) * sizeof(float), DType::f32, c.root});
		in_pieces(c.count, DType::f32, [&](int64_t at, int n) {
			MPI_Request request = MPI_REQUEST_NULL;
			TOWER_MPI(MPI_Ibcast(segment + at, n, MPI_FLOAT, c.root, c.raw, &request));
			wait_request(request, {"parameter server: values from owner", c.raw, -1, "owner", static_cast<int64_t>(o)});
		});
	}
	if (!shares_.worker)
		return;
	for (const VariableSlice& s : placement_.slices)
		model_slice(s, false).copy_from(buffer_slice(values_, s));
}

size_t MpiPsTransport::moved_bytes() const
{
	// Gradients travel to the owners in the transport type; values come back in f32.
	size_t total = 0;
	for (const int64_t e : placement_.owner_elements)
		total += static_cast<size_t>(e) * (dtype_size(shares_.compress) + sizeof(float));
	return total;
}

} // namespace

std::unique_ptr<PsTransport> make_mpi_ps_transport(const Topology& topology, const PsShares& shares)
{
	return std::make_unique<MpiPsTransport>(topology, shares);
}

} // namespace tower
