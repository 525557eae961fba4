// Post-init broadcast of the root's (by default rank 0's) named tensors, guarded by a signature
// check across ranks.
#include "collectives/broadcast_named.h"

#include "collectives/transports/communicator.h"
#include "collectives/signature_check.h"
#include "base/mpi/agree.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"

namespace tower {

void broadcast_named(const Topology& topology, std::vector<NamedTensor>& tensors, int root)
{
	const CommHandle comm = duplicate_comm(topology.world());
	const MPI_Comm own = comm.get();
	check_signatures(own, tensors, root, "broadcast list");
	std::string problem;
	for (const auto& t : tensors)
		if (t.tensor.device().kind != tensors.front().tensor.device().kind) {
			problem = fmt::format("'{}' is on {} but '{}' on {}; broadcast one device's tensors at a time",
					      t.name, t.tensor.device().name(), tensors.front().name,
					      tensors.front().tensor.device().name());
			break;
		}
	agree(own, problem);
	if (tensors.empty())
		return;
	const auto channel = make_communicator(own, tensors.front().tensor.device());
	for (auto& t : tensors)
		channel->broadcast(t.tensor.data(), static_cast<size_t>(t.tensor.numel()), t.tensor.dtype(), root);
}

} // namespace tower
