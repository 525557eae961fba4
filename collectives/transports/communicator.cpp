// One interface for collective operations on a buffer, with the backend chosen by the buffer's device.
#include "collectives/transports/communicator.h"

#include "collectives/transports/mpi_communicator.h"
#include "collectives/transports/nccl_communicator.h"

namespace tower {

std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, const Device& device)
{
	if (device.is_cuda())
		return make_nccl_communicator(comm, device);
	return std::make_unique<MpiCommunicator>(comm);
}

} // namespace tower
