// ThreadSanitizer probe: the comm thread all-reducing buckets over MPI while the main thread fills the next ones, as --overlap does.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "runtime/strategies/comm_thread.h"

int main(int argc, char** argv)
{
	int provided = 0;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	int rank = 0, size = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm comm = MPI_COMM_NULL;
	MPI_Comm_dup(MPI_COMM_WORLD, &comm);
	constexpr int buckets = 8, count = 1 << 14, steps = 20;
	std::vector<std::vector<float>> data(buckets, std::vector<float>(count));
	long wrong = 0;
	{
		tower::CommThread thread;
		for (int step = 0; step < steps; ++step) {
			for (int b = 0; b < buckets; ++b) {
				for (float& x : data[b]) // "backward" writes bucket b, then hands it over
					x = static_cast<float>(rank + step);
				float* bucket = data[b].data();
				thread.submit([bucket, comm] {
					MPI_Allreduce(MPI_IN_PLACE, bucket, count, MPI_FLOAT, MPI_SUM, comm);
				});
			}
			thread.wait_all();
			const float want = static_cast<float>(size * step + size * (size - 1) / 2);
			for (const auto& bucket : data)
				for (float x : bucket)
					wrong += x != want;
		}
	}
	MPI_Comm_free(&comm);
	std::printf("rank %d: thread level %d, %ld wrong values\n", rank, provided, wrong);
	MPI_Finalize();
	return wrong == 0 ? 0 : 1;
}
