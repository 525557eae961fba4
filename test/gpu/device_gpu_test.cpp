// GPU test: device choice by host-local rank, physical GPU names, and copies that really wait.
#include <doctest/doctest.h>

#include <regex>
#include <string>

#include <cuda_runtime.h>

#include "base/device/device.h"
#include "base/tensor/memory.h"
#include "base/tensor/tensor.h"
#include "test/gpu/slow_kernel.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

TEST_CASE("a visible GPU is chosen by host-local rank and named by bus id and UUID")
{
	const Topology t(world().comm(), std::nullopt);
	const GpuRuntimeInfo gpus = probe_gpu_runtime();
	REQUIRE(gpus.device_count > 0);
	const Device d = assign_device(t, gpus, DevicePreference::automatic);
	CHECK(d.is_cuda());
	CHECK(d.index == t.host_local_rank() % gpus.device_count);
	int current = -1;
	REQUIRE(cudaGetDevice(&current) == cudaSuccess);
	CHECK(current == d.index);
	const std::string id = physical_gpu(gpus, d);
	INFO("physical GPU: ", id);
	// The bus id as CUDA writes it (domain:bus:device.function, hex), the UUID as nvidia-smi does.
	const std::regex shape("PCI [0-9a-fA-F]+:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-9a-fA-F], "
			       "GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
	CHECK(std::regex_match(id, shape));
}

// A device-to-device cudaMemcpy returns before the copy is done; copy_bytes promises it is done.
TEST_CASE("copy_bytes between device buffers returns after the copy, behind a slow kernel")
{
	const Topology t(world().comm(), std::nullopt);
	const Device g = assign_device(t, probe_gpu_runtime(), DevicePreference::cuda);
	const size_t count = 4096;
	Tensor a = Tensor::zeros({static_cast<int64_t>(count)}, DType::f32, g);
	Tensor b = Tensor::zeros({static_cast<int64_t>(count)}, DType::f32, g);
	wait_thread_stream(g);
	REQUIRE(tower::test::launch_slow_fill(a.data_as<float>(), count, 3.0f, 0.5f, 200) == 0);
	copy_bytes(b.data(), g, a.data(), g, count * sizeof(float));
	CHECK(cudaStreamQuery(cudaStreamLegacy) == cudaSuccess); // nothing left in flight
	const std::vector<float> got = b.to_host_f32();
	size_t wrong = 0;
	for (size_t i = 0; i < count; ++i)
		wrong += got[i] != 3.0f + 0.5f * static_cast<float>(i);
	CHECK(wrong == 0);
}
