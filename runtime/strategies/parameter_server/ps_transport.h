// How the parameter-server strategy moves gradients to the variable owners and values back.
#pragma once

#include <memory>
#include <vector>

#include "base/device/device.h"
#include "base/tensor/parameter.h"
#include "base/mpi/topology.h"
#include "runtime/strategies/placement.h"

namespace tower {

// What a transport serves: the model's parameters, where each slice lives, and this rank's part.
struct PsShares {
	std::vector<Parameter*> parameters; // the model's, in model order
	const Placement* placement = nullptr;
	int my_owner_index = -1; // index into placement->owners; -1 when this rank owns nothing
	bool worker = false;     // this rank trains (holds a batch and a model gradient)
	int workers = 0;
	DType compress = DType::f32; // the gradients' type on the wire
};

// One step through a transport, collective over the job's ranks:
//   push (gradients to their owners) -> sum_over_ranks (norm and finiteness) -> the owner's
//   optimizer on owned_value/owned_gradient -> publish (values to every worker's model).
// The owner's share is held slice by slice in placement order; the views stay valid for the
// transport's life.
class PsTransport {
public:
	virtual ~PsTransport() = default;

	// "reduce to owners, broadcast from owners", ... for the run summary.
	virtual const char* name() const = 0;
	// This owner's master copy of slice `s` and its reduced gradient (views; `s` must be its own).
	virtual Tensor owned_value(const VariableSlice& s) = 0;
	virtual Tensor owned_gradient(const VariableSlice& s) = 0;
	// Sums every worker's model gradient, each multiplied by `worker_factor`, into this owner's
	// reduced share and multiplies the sum by `owner_factor`; returns the share's sum of squares
	// (0 on a rank that owns nothing). `poison` makes this rank's contribution non-finite
	// (--inject-nonfinite).
	virtual double push(float worker_factor, float owner_factor, bool poison) = 0;
	// The sum of every rank's `partial`, summed in the same order on every rank.
	virtual double sum_over_ranks(double partial) = 0;
	// Every owner's values into every worker's model. With `settle`, returns only once every
	// worker has its copy (see settle()).
	virtual void publish(bool settle) = 0;
	// Returns once no worker still reads the values of the last publish(), so the owners may
	// change them outside a step (averages swapped in, a checkpoint restored). Inside a step the
	// next push orders them.
	virtual void settle() = 0;
	// Bytes that travel per step, in the transport type.
	virtual size_t moved_bytes() const = 0;
};

// Open MPI collectives: a fused reduce to each owner and a broadcast from it. Works across hosts
// and with any --compress type. Its initial values are the owners' model values.
std::unique_ptr<PsTransport> make_mpi_ps_transport(const Topology& topology, const PsShares& shares);

// True when every rank of the job shares one host's memory, the model lives on the CPU and the
// gradients travel as f32, so the shared-memory transport can serve the job.
bool shm_ps_transport_applies(const Topology& topology, const Device& device, DType compress);
// Shared memory on one host: the model's values and gradients are rebound to views of shared
// windows, owners read the workers' gradients in place and the workers copy the owners' new
// values out of the owners' models. Collective; the parameters get their own memory back when
// it is destroyed.
std::unique_ptr<PsTransport> make_shm_ps_transport(const Topology& topology, const PsShares& shares);

} // namespace tower
