// Proves the towers hold the same parameters: a 64-bit hash per tensor, compared across ranks.
#include "runtime/safety/replica_check.h"

#include <string>

#include "base/mpi/agree.h"
#include "base/content_hash.h"
#include "base/error.h"
#include "base/tensor/memory.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

uint64_t hash_bytes(const void* data, size_t bytes, uint64_t seed)
{
	return content_hash(data, bytes, seed);
}

std::vector<uint64_t> tensor_hashes(const std::vector<NamedTensor>& tensors)
{
	std::vector<uint64_t> out;
	out.reserve(tensors.size());
	std::vector<unsigned char> host;
	for (const auto& t : tensors) {
		const void* bytes = t.tensor.data();
		if (t.tensor.device().is_cuda()) {
			host.resize(t.tensor.bytes());
			copy_bytes(host.data(), Device{}, t.tensor.data(), t.tensor.device(), t.tensor.bytes());
			bytes = host.data();
		}
		out.push_back(hash_bytes(bytes, t.tensor.bytes()));
	}
	return out;
}

uint64_t combine_hashes(const std::vector<uint64_t>& hashes)
{
	return hash_bytes(hashes.data(), hashes.size() * sizeof(uint64_t));
}

uint64_t check_replicas_of(MPI_Comm comm, const std::vector<NamedTensor>& tensors)
{
	const auto hashes = tensor_hashes(tensors);
	std::vector<uint64_t> reference = hashes;
	const int count = static_cast<int>(reference.size());
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Ibcast(reference.data(), count, MPI_UINT64_T, 0, comm, &request));
	wait_request(request, {"replica check", comm});
	std::string problem;
	for (size_t i = 0; i < hashes.size(); ++i)
		if (hashes[i] != reference[i]) {
			problem = fmt::format("parameters differ from rank 0's, first in '{}'", tensors[i].name);
			break;
		}
	agree(comm, problem);
	return combine_hashes(hashes);
}

} // namespace tower
