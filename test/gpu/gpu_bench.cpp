// GPU benchmark for docs/gpu-validation.md: cuBLAS GEMM on the models' shapes, bucket pack/unpack
// against a device-to-device copy, and tower's one-GPU all-reduce against raw ncclAllReduce.
// Usage: gpu_bench [--quick]   (one rank, one GPU; prints a table, exits 77 without a GPU)
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "collectives/all_reduce.h"
#include "collectives/fusion/bucket_plan.h"
#include "collectives/fusion/pack.h"
#include "models/kernels/ops.h"
#include "base/device/cuda_check.h"
#include "base/device/device.h"
#include "base/tensor/memory.h"
#include "base/mpi/world.h"

using namespace tower;

namespace {

int iterations = 20;

// Milliseconds per call of `work`, from CUDA events on the default stream around `iterations`
// calls after three untimed ones: what the GPU took, not what the launches took.
double event_ms(const std::function<void()>& work)
{
	for (int i = 0; i < 3; ++i)
		work();
	cudaEvent_t start, stop;
	TOWER_CUDA(cudaEventCreate(&start));
	TOWER_CUDA(cudaEventCreate(&stop));
	TOWER_CUDA(cudaEventRecord(start, cudaStreamLegacy));
	for (int i = 0; i < iterations; ++i)
		work();
	TOWER_CUDA(cudaEventRecord(stop, cudaStreamLegacy));
	TOWER_CUDA(cudaEventSynchronize(stop));
	float ms = 0;
	TOWER_CUDA(cudaEventElapsedTime(&ms, start, stop));
	cudaEventDestroy(start);
	cudaEventDestroy(stop);
	return static_cast<double>(ms) / iterations;
}

struct GemmShape {
	const char* what;
	int64_t m, n, k;
};

// Forward and both backward GEMMs of the MLP (784-1024-1024-10) and the CNN's fc1 (3136-512) at
// batch 256, then one large square product for the device's reachable rate.
void bench_gemm(const Device& g, const std::string& gpu_name)
{
	const std::vector<GemmShape> shapes = {
		{"mlp fc1 forward", 256, 1024, 784},	{"mlp fc1 weight grad", 784, 1024, 256},
		{"mlp fc2 forward", 256, 1024, 1024},	{"mlp fc2 input grad", 256, 1024, 1024},
		{"mlp fc3 forward", 256, 10, 1024},	{"cnn fc1 forward", 256, 512, 3136},
		{"cnn fc1 weight grad", 3136, 512, 256}, {"square 8192", 8192, 8192, 8192},
	};
	// Dense datasheet peaks of the SXM parts (fp32 without tensor cores; bf16 tensor cores).
	const bool hopper = gpu_name.find("H100") != std::string::npos || gpu_name.find("H200") != std::string::npos;
	const Ops& ops = ops_for(g);
	std::printf("\n# cuBLAS GEMM (C = A B, row-major [m,k] x [k,n]); peak: %s\n",
		    hopper ? "fp32 67 TFLOP/s, bf16 989 TFLOP/s (H100/H200 SXM, dense)" : "unknown for this GPU");
	std::printf("%-22s %6s %6s %6s %6s %10s %10s %8s\n", "shape", "dtype", "m", "n", "k", "ms", "GFLOP/s", "of peak");
	for (DType t : {DType::f32, DType::bf16})
		for (const GemmShape& s : shapes) {
			const Tensor a = Tensor::zeros({s.m, s.k}, t, g), b = Tensor::zeros({s.k, s.n}, t, g);
			const Tensor c = Tensor::zeros({s.m, s.n}, t, g);
			ops.fill(a, 0.5f);
			ops.fill(b, 0.25f);
			const double ms = event_ms([&] { ops.gemm(Transpose::no, Transpose::no, 1.0f, a, b, 0.0f, c); });
			const double gflops = 2.0 * s.m * s.n * s.k / (ms * 1e6);
			const double peak = t == DType::f32 ? 67e3 : 989e3;
			std::printf("%-22s %6s %6lld %6lld %6lld %10.4f %10.0f %7.1f%%\n", s.what, std::string(dtype_name(t)).c_str(),
				    static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k), ms,
				    gflops, hopper ? 100.0 * gflops / peak : 0.0);
		}
}

// The MLP's gradients in one bucket: pack (every tensor into the bucket) and unpack, each one
// kernel launch, against one cudaMemcpy of the bucket's bytes. GB/s count the bytes copied once.
void bench_pack(const Device& g)
{
	const std::vector<TensorSpec> specs = {{"fc1.w", {784, 1024}, DType::f32}, {"fc1.b", {1024}, DType::f32},
					       {"fc2.w", {1024, 1024}, DType::f32}, {"fc2.b", {1024}, DType::f32},
					       {"fc3.w", {1024, 10}, DType::f32},   {"fc3.b", {10}, DType::f32}};
	const BucketPlan plan = plan_buckets(specs, size_t{64} << 20, 256);
	std::vector<Tensor> tensors;
	for (const auto& s : specs)
		tensors.push_back(Tensor::zeros(s.shape, s.dtype, g));
	const Tensor storage = make_bucket_storage(plan.buckets[0], g);
	const Tensor copy = Tensor::zeros(storage.shape(), storage.dtype(), g);
	const double bytes = static_cast<double>(storage.bytes());
	const double pack = event_ms([&] { pack_bucket(plan.buckets[0], tensors, storage); });
	const double unpack = event_ms([&] { unpack_bucket(plan.buckets[0], storage, tensors); });
	const double memcpy_ms = event_ms([&] {
		TOWER_CUDA(cudaMemcpyAsync(copy.data(), storage.data(), storage.bytes(), cudaMemcpyDeviceToDevice,
					   cudaStreamLegacy));
	});
	std::printf("\n# bucket pack/unpack of the MLP's gradients (%.1f MB, %zu tensors)\n", bytes / 1e6, specs.size());
	std::printf("%-28s %10s %10s\n", "copy", "ms", "GB/s");
	std::printf("%-28s %10.4f %10.1f\n", "pack_bucket", pack, bytes / (pack * 1e6));
	std::printf("%-28s %10.4f %10.1f\n", "unpack_bucket", unpack, bytes / (unpack * 1e6));
	std::printf("%-28s %10.4f %10.1f\n", "cudaMemcpy device to device", memcpy_ms, bytes / (memcpy_ms * 1e6));
}

// One rank: tower's ring all-reduce (NCCL behind the communicator, with its event ordering and
// the host wait) against ncclAllReduce on a one-GPU communicator, out of place, f32 sum.
void bench_all_reduce(const Device& g)
{
	const Topology self(MPI_COMM_SELF, std::nullopt);
	auto tower_ring = make_all_reduce(self, g, AllReduceMode::ring);
	ncclComm_t raw = nullptr;
	int device = g.index;
	if (ncclCommInitAll(&raw, 1, &device) != ncclSuccess)
		throw Error("ncclCommInitAll failed for the raw NCCL baseline");
	cudaStream_t stream = nullptr;
	TOWER_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	std::printf("\n# one-GPU all-reduce, f32 sum, out of place\n");
	std::printf("%12s %14s %14s %10s\n", "bytes", "tower us", "raw nccl us", "ratio");
	for (size_t bytes : {size_t{1} << 20, size_t{16} << 20, size_t{256} << 20}) {
		const size_t count = bytes / 4;
		void* send = device_alloc(g, bytes);
		void* recv = device_alloc(g, bytes);
		const double ours = event_ms([&] { tower_ring->run(send, recv, count, DType::f32, ReduceOp::sum); });
		cudaEvent_t start, stop;
		TOWER_CUDA(cudaEventCreate(&start));
		TOWER_CUDA(cudaEventCreate(&stop));
		for (int i = 0; i < 3; ++i)
			ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, raw, stream);
		TOWER_CUDA(cudaEventRecord(start, stream));
		for (int i = 0; i < iterations; ++i)
			ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, raw, stream);
		TOWER_CUDA(cudaEventRecord(stop, stream));
		TOWER_CUDA(cudaEventSynchronize(stop));
		float ms = 0;
		TOWER_CUDA(cudaEventElapsedTime(&ms, start, stop));
		const double theirs = static_cast<double>(ms) / iterations;
		std::printf("%12zu %14.1f %14.1f %10.2f\n", bytes, 1e3 * ours, 1e3 * theirs, ours / theirs);
		cudaEventDestroy(start);
		cudaEventDestroy(stop);
		device_free(g, send);
		device_free(g, recv);
	}
	cudaStreamDestroy(stream);
	ncclCommDestroy(raw);
}

} // namespace

int main(int argc, char** argv)
{
	World world(&argc, &argv);
	if (argc > 1 && std::strcmp(argv[1], "--quick") == 0)
		iterations = 3;
	const GpuRuntimeInfo gpus = probe_gpu_runtime();
	if (gpus.device_count == 0) {
		std::printf("SKIP: gpu_bench needs a GPU (%s)\n", gpus.why_none.c_str());
		return 77;
	}
	try {
		const Topology self(MPI_COMM_SELF, std::nullopt);
		const Device g = assign_device(self, gpus, DevicePreference::cuda);
		std::printf("gpu_bench on %s (%s), CUDA runtime %s, driver %s, cuBLAS %s, NCCL %s; %d timed iterations\n",
			    gpus.device_names.at(static_cast<size_t>(g.index)).c_str(), physical_gpu(gpus, g).c_str(),
			    gpus.cuda_runtime.c_str(), gpus.cuda_driver.c_str(), gpus.cublas.c_str(), gpus.nccl.c_str(),
			    iterations);
		bench_gemm(g, gpus.device_names.at(static_cast<size_t>(g.index)));
		bench_pack(g);
		bench_all_reduce(g);
	} catch (const std::exception& e) {
		std::fprintf(stderr, "gpu_bench: %s\n", e.what());
		return 1;
	}
	return 0;
}
