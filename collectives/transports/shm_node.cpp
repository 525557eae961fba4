// Shared memory among the ranks of one host: a slot per rank in an MPI-3 window, and a flag barrier.
#include "collectives/transports/shm_node.h"

#include <atomic>

#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

namespace {

// The counter sits alone on its cache line, ahead of the slot, so spinning on it does not
// disturb the data; the mailbox takes the next line.
constexpr size_t header_bytes = 128;

} // namespace

ShmNode::ShmNode(MPI_Comm comm, size_t slot_bytes) : comm_(duplicate_comm(comm)), slot_bytes_(slot_bytes)
{
	TOWER_MPI(MPI_Comm_rank(comm_.get(), &rank_));
	TOWER_MPI(MPI_Comm_size(comm_.get(), &size_));
	slots_.resize(static_cast<size_t>(size_));
	counters_.resize(static_cast<size_t>(size_));
	const size_t rounded = (slot_bytes + header_bytes - 1) / header_bytes * header_bytes;
	char* mine = nullptr;
	TOWER_MPI(MPI_Win_allocate_shared(static_cast<MPI_Aint>(header_bytes + rounded), 1, MPI_INFO_NULL,
					  comm_.get(), &mine, &window_));
	for (int r = 0; r < size_; ++r) {
		MPI_Aint bytes = 0;
		int unit = 0;
		char* base = nullptr;
		TOWER_MPI(MPI_Win_shared_query(window_, r, &bytes, &unit, &base));
		counters_[static_cast<size_t>(r)] = reinterpret_cast<uint64_t*>(base);
		slots_[static_cast<size_t>(r)] = base + header_bytes;
	}
	std::atomic_ref<uint64_t>(*counters_[static_cast<size_t>(rank_)]).store(0, std::memory_order_relaxed);
	// Everyone's counter is zero before anyone's first barrier.
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Ibarrier(comm_.get(), &request));
	wait_request(request, {"shared-memory setup", comm_.get()});
}

ShmNode::~ShmNode()
{
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (!finalized && window_ != MPI_WIN_NULL)
		MPI_Win_free(&window_);
}

void ShmNode::barrier(const char* operation)
{
	epoch_ += 1;
	std::atomic_ref<uint64_t>(*counters_[static_cast<size_t>(rank_)]).store(epoch_, std::memory_order_release);
	auto arrived = [this](int r) {
		return std::atomic_ref<uint64_t>(*counters_[static_cast<size_t>(r)]).load(std::memory_order_acquire) >= epoch_;
	};
	// The counters say exactly who is missing, should the wait be reported.
	auto missing = [&] {
		std::vector<int> out;
		for (int r = 0; r < size_; ++r)
			if (!arrived(r))
				out.push_back(r);
		return out;
	};
	for (int r = 0; r < size_; ++r)
		wait_until([&] { return arrived(r); }, {operation, comm_.get()}, missing);
}

} // namespace tower
