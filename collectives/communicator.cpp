// One interface for collective operations on a buffer, with the backend chosen by the buffer's device.
#include "collectives/communicator.h"

#include "collectives/mpi_communicator.h"
#include "collectives/nccl_communicator.h"

namespace tower {

std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, const Device& device)
{
	if (device.is_cuda())
		return make_nccl_communicator(comm, device);
	return std::make_unique<MpiCommunicator>(comm);
}

} // namespace tower
