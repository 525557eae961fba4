// GPU test: with a visible GPU, rank L on a host is given CUDA device L.
#include <doctest/doctest.h>

#include "runtime/base/device.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

TEST_CASE("a visible GPU is chosen by host-local rank")
{
	const Topology t(world().comm(), std::nullopt);
	const GpuRuntimeInfo gpus = probe_gpu_runtime();
	REQUIRE(gpus.device_count > 0);
	const Device d = assign_device(t, gpus, DevicePreference::automatic);
	CHECK(d.is_cuda());
	CHECK(d.index == t.host_local_rank());
}
