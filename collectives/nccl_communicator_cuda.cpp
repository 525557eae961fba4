// The NCCL backend of Communicator, for buffers in CUDA device memory.
#include "collectives/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/base/gpu_runtime.h"
#include "runtime/base/mpi_check.h"
#include "runtime/base/topology.h"
#include "runtime/base/watched_wait.h"

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
		ncclUniqueId id{};
		if (rank_ == 0)
			TOWER_NCCL(ncclGetUniqueId(&id));
		MPI_Request request = MPI_REQUEST_NULL;
		TOWER_MPI(MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, own, &request));
		wait_request(request, {"NCCL setup (unique id)", own});
		TOWER_NCCL(ncclCommInitRank(&comm_, size_, id, rank_));
		TOWER_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
	}

	~NcclCommunicator() override
	{
		if (scratch_)
			cudaFree(scratch_);
		if (stream_)
			cudaStreamDestroy(stream_);
		if (comm_)
			ncclCommDestroy(comm_);
	}

	int rank() const override { return rank_; }
	int size() const override { return size_; }
	const Device& device() const override { return device_; }

	void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override
	{
		TOWER_NCCL(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), comm_, stream_));
		wait();
	}

	void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override
	{
		TOWER_NCCL(ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), comm_, stream_));
		wait();
	}

	void all_gather(const void* send, void* recv, size_t count, DType dtype) override
	{
		TOWER_NCCL(ncclAllGather(send, recv, count, nccl_type(dtype), comm_, stream_));
		wait();
	}

	void broadcast(void* data, size_t count, DType dtype, int root) override
	{
		TOWER_NCCL(ncclBroadcast(data, data, count, nccl_type(dtype), root, comm_, stream_));
		wait();
	}

	void barrier() override
	{
		// A one-element all-reduce on the stream orders this barrier after queued collectives.
		if (!scratch_)
			TOWER_CUDA(cudaMalloc(&scratch_, sizeof(float)));
		all_reduce(scratch_, scratch_, 1, DType::f32, ReduceOp::sum);
	}

private:
	// Waits for the stream while polling NCCL: a peer that died or a network failure shows up as
	// an asynchronous error, which would otherwise leave the stream waiting forever.
	// The wait is watched (runtime/base/watched_wait.h): a peer that stopped is named.
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
				TOWER_NCCL(ncclCommGetAsyncError(comm_, &async));
				if (async != ncclSuccess && async != ncclInProgress) {
					ncclCommAbort(comm_);
					comm_ = nullptr;
					throw Error(fmt::format("NCCL communicator of rank {} of {} failed: {}; it was aborted, "
								"check the other ranks' logs for the first failure",
								rank_, size_, ncclGetErrorString(async)));
				}
				return false;
			},
			{"NCCL collective", mpi_.get()});
	}

	CommHandle mpi_;
	Device device_;
	int rank_ = 0, size_ = 1;
	ncclComm_t comm_ = nullptr;
	cudaStream_t stream_ = nullptr;
	void* scratch_ = nullptr;
};

} // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const Device& device)
{
	return std::make_unique<NcclCommunicator>(comm, device);
}

} // namespace tower
