// The NCCL backend of Communicator in a build without CUDA: there is none.
#include "collectives/transports/nccl_communicator.h"

#include "base/error.h"

namespace tower {

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, const Device& device)
{
	throw Error(fmt::format("collectives on {} need NCCL, but tower was built without CUDA; rebuild with "
				"-Dcuda=enabled or keep the buffers on the CPU",
				device.name()));
}

} // namespace tower
