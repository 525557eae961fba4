// The NCCL backend of Communicator, for buffers in CUDA device memory.
#include "collectives/transports/nccl_communicator.h"

#include <exception>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

#include "base/device/cuda_check.h"
#include "base/error.h"
#include "base/fatal.h"
#include "base/device/gpu_runtime.h"
#include "base/device/stream.h"
#include "base/mpi/mpi_check.h"
#include "base/mpi/topology.h"
#include "base/watchdog/watched_wait.h"

#define TOWER_NCCL(call)                                                                        \
	do {                                                                                    \
		const ncclResult_t tower_nccl_rc_ = (call);                                     \
		if (tower_nccl_rc_ != ncclSuccess && tower_nccl_rc_ != ncclInProgress)          \
			throw ::tower::Error(fmt::format("{}:{}: {} failed: {}", __FILE__, __LINE__, \
							 #call, ncclGetErrorString(tower_nccl_rc_))); \
	} while (0)

namespace tower {

namespace {

ncclDataType_t nccl_type(DType dtype)
{
	switch (dtype) {
	case DType::f32: return ncclFloat32;
	case DType::f64: return ncclFloat64;
	case DType::f16: return ncclFloat16;
	case DType::bf16: return ncclBfloat16;
	case DType::i32: return ncclInt32;
	case DType::i64: return ncclInt64;
	}
	return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op)
{
	switch (op) {
	case ReduceOp::sum: return ncclSum;
	case ReduceOp::mean: return ncclAvg;
	case ReduceOp::max: return ncclMax;
	case ReduceOp::min: return ncclMin;
	}
	return ncclSum;
}

class NcclCommunicator final : public Communicator {
public:
	NcclCommunicator(MPI_Comm comm, const Device& device) : device_(device)
	{
		mpi_ = duplicate_comm(comm);
		const MPI_Comm own = mpi_.get();
		TOWER_MPI(MPI_Comm_rank(own, &rank_));
		TOWER_MPI(MPI_Comm_size(own, &size_));
		select_gpu(device.index);
		// Rank 0's failure to make the id travels with it, so no rank waits in the broadcast or in
		// ncclCommInitRank for a peer that gave up.
		struct {
			ncclUniqueId id;
			ncclResult_t made;
		} root{{}, ncclSuccess};
		if (rank_ == 0)
			root.made = ncclGetUniqueId(&root.id);
		MPI_Request request = MPI_REQUEST_NULL;
		TOWER_MPI(MPI_Ibcast(&root, sizeof root, MPI_BYTE, 0, own, &request));
		wait_request(request, {"NCCL setup (unique id)", own});
		if (root.made != ncclSuccess)
			throw Error(fmt::format("ncclGetUniqueId failed on rank 0 of {}: {}; check NCCL's installation "
						"and NCCL_DEBUG=WARN output on rank 0", size_, ncclGetErrorString(root.made)));
		TOWER_NCCL(ncclCommInitRank(&comm_, size_, root.id, rank_));
		try {
			TOWER_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
			TOWER_CUDA(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
		} catch (...) {
			release(true);
			throw;
		}
	}

	// NCCL's abort and destroy wait for the node's other ranks, so neither may run where this
	// rank cannot know that its peers will join: while an exception unwinds, the communicator is
	// left to the process's end (an error every rank agreed on ends the job in run_guarded(); any
	// other error, and a failed collective, end it through fatal()). Otherwise it goes before any
	// cudaFree, which synchronizes the device.
	~NcclCommunicator() override
	{
		if (std::uncaught_exceptions() == 0)
			release(false);
	}

	int rank() const override { return rank_; }
	int size() const override { return size_; }
	const Device& device() const override { return device_; }

	void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override
	{
		run([&] { return ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), comm_, stream_); });
	}

	void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override
	{
		run([&] { return ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), comm_, stream_); });
	}

	void all_gather(const void* send, void* recv, size_t count, DType dtype) override
	{
		run([&] { return ncclAllGather(send, recv, count, nccl_type(dtype), comm_, stream_); });
	}

	void broadcast(void* data, size_t count, DType dtype, int root) override
	{
		run([&] { return ncclBroadcast(data, data, count, nccl_type(dtype), root, comm_, stream_); });
	}

	void barrier() override
	{
		// A one-element all-reduce on the stream orders this barrier after queued collectives.
		if (!scratch_) {
			select_gpu(device_.index);
			TOWER_CUDA(cudaMalloc(&scratch_, sizeof(float)));
		}
		all_reduce(scratch_, scratch_, 1, DType::f32, ReduceOp::sum);
	}

private:
	// Every call may come from another host thread (the communication thread), and CUDA's current
	// device is per thread. The buffers were written by work on the calling thread's stream
	// (base/device/stream.h: backward's kernels, cuBLAS, casts, packing and fills on the default
	// stream; a bucket's casts on the communication thread's own, which waited for the bucket's
	// marker): NCCL's stream waits for all of it, or a collective could read a bucket before it
	// holds the gradients.
	void begin()
	{
		TOWER_CHECK(comm_, "NCCL communicator of rank {} of {} was aborted after an earlier failure; "
			    "create a new one", rank_, size_);
		select_gpu(device_.index);
		TOWER_CUDA(cudaEventRecord(inputs_ready_, static_cast<cudaStream_t>(thread_stream())));
		TOWER_CUDA(cudaStreamWaitEvent(stream_, inputs_ready_, 0));
	}

	// A collective that failed on this rank may be under way on the others, which would wait in it
	// (or in NCCL's teardown) for this one: the job ends at once through the one abort path,
	// MPI_Abort, which ends every rank whatever it waits for.
	template <typename Launch> void run(Launch launch)
	{
		begin();
		const ncclResult_t rc = launch();
		if (rc != ncclSuccess && rc != ncclInProgress)
			fatal(fmt::format("NCCL collective on rank {} of {} failed to start: {}", rank_, size_,
					  ncclGetErrorString(rc)));
		wait();
	}

	// Waits for the stream while polling NCCL: a peer that died or a network failure shows up as
	// an asynchronous error, which would otherwise leave the stream waiting forever. Returning
	// only once the collective is complete orders every later use of its buffers after it.
	// The wait is watched (base/watchdog/watched_wait.h): a peer that stopped is named.
	void wait()
	{
		wait_until(
			[this] {
				const cudaError_t done = cudaStreamQuery(stream_);
				if (done == cudaSuccess)
					return true;
				if (done != cudaErrorNotReady)
					TOWER_CUDA(done);
				ncclResult_t async = ncclSuccess;
				const ncclResult_t polled = ncclCommGetAsyncError(comm_, &async);
				if (polled != ncclSuccess)
					async = polled;
				if (async != ncclSuccess && async != ncclInProgress)
					fatal(fmt::format("NCCL communicator of rank {} of {} failed: {}; ending the job (check "
							  "the other ranks' logs for the first failure)",
							  rank_, size_, ncclGetErrorString(async)));
				return false;
			},
			{"NCCL collective", mpi_.get()});
	}

	// Never throws: a destructor may run after a sticky CUDA error, and only the first error
	// says what went wrong.
	void release(bool abort) noexcept
	{
		cudaSetDevice(device_.index);
		if (comm_) {
			if (abort)
				ncclCommAbort(comm_);
			else
				ncclCommDestroy(comm_);
			comm_ = nullptr;
		}
		if (scratch_)
			cudaFree(scratch_);
		if (inputs_ready_)
			cudaEventDestroy(inputs_ready_);
		if (stream_)
			cudaStreamDestroy(stream_);
		scratch_ = nullptr;
		inputs_ready_ = nullptr;
		stream_ = nullptr;
	}

	CommHandle mpi_;
	Device device_;
	int rank_ = 0, size_ = 1;
	ncclComm_t comm_ = nullptr;
	cudaStream_t stream_ = nullptr;
	cudaEvent_t inputs_ready_ = nullptr;
	void* scratch_ = nullptr;
};

} // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const Device& device)
{
	return std::make_unique<NcclCommunicator>(comm, device);
}

} // namespace tower
