// The memory-copy rate the shared-memory all-reduce is compared with on one host, measured in the bench's run.
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "cli/bench/bench.h"

namespace tower::cli {

MemoryBound measure_memory_bound(MPI_Comm comm, size_t bytes, int iters)
{
	int ranks = 1;
	MPI_Comm_size(comm, &ranks);
	// Every rank copies at once, as every rank reduces at once inside the all-reduce: the rate is
	// what one rank gets while the others load the memory too. Pages are touched before timing.
	std::vector<char> src(bytes, 1), dst(bytes, 0);
	std::memcpy(dst.data(), src.data(), bytes);
	const double us = per_call_us(comm, iters, [&] {
		std::memcpy(dst.data(), src.data(), bytes);
		src[0] = dst[bytes - 1]; // each copy depends on the last, so none is left out
	});
	MemoryBound b;
	b.ranks = ranks;
	b.copy_gbps = us > 0 ? static_cast<double>(bytes) / us / 1e3 : 0;
	// The direct shared-memory all-reduce has each rank read its 1/n shard of all n inputs (S bytes)
	// and write the reduced shard into all n outputs (S bytes): the traffic of copying S bytes. At
	// the copy rate, algbw = copy rate and busbw = algbw 2(n-1)/n. Not a hard limit: a copy is one
	// read and one write stream, the reduction several at once, which memory can serve faster.
	b.busbw_gbps = b.copy_gbps * 2.0 * (ranks - 1) / ranks;
	return b;
}

std::string describe_memory_bound(const MemoryBound& b, size_t bytes)
{
	return fmt::format("# memory copy: {:.2f} GB/s per rank copying {} bytes with all {} ranks at once; the direct "
			   "shared-memory all-reduce reads S and writes S bytes per rank, as a copy of S does, so at that "
			   "rate its busbw is copy x 2(n-1)/n = {:.2f} GB/s",
			   b.copy_gbps, bytes, b.ranks, b.busbw_gbps);
}

} // namespace tower::cli
