// Tests of device assignment on machines with and without GPUs.
#include <doctest/doctest.h>

#include "runtime/options/names.h"
#include "base/device/device.h"
#include "base/error.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

TEST_CASE("without GPUs every rank gets the CPU")
{
	const Topology t(world().comm(), std::nullopt);
	GpuRuntimeInfo none;
	none.why_none = "no CUDA device is visible";
	CHECK(assign_device(t, none, DevicePreference::automatic).name() == "cpu");
	CHECK(assign_device(t, none, DevicePreference::cpu).name() == "cpu");
	CHECK_THROWS_WITH_AS(assign_device(t, none, DevicePreference::cuda),
			     doctest::Contains("no GPU is usable"), AgreedError);
}

TEST_CASE("more ranks on a host than GPUs is an error naming the counts")
{
	const Topology t(world().comm(), std::nullopt);
	if (t.host_local_size() < 2)
		return; // one rank fits on any GPU count
	GpuRuntimeInfo one;
	one.built = true;
	one.device_count = 1;
	CHECK_THROWS_WITH_AS(assign_device(t, one, DevicePreference::automatic),
			     doctest::Contains(fmt::format("runs {} ranks but sees only 1 GPU", t.host_local_size()).c_str()),
			     AgreedError);
	// Two GPUs for more than two ranks: ranks 0 and 2 would share the first.
	if (t.host_local_size() < 3)
		return;
	GpuRuntimeInfo two = one;
	two.device_count = 2;
	two.device_ids = {"PCI 0000:01:00.0, GPU-a", "PCI 0000:02:00.0, GPU-b"};
	CHECK_THROWS_WITH_AS(choose_device(t, two, DevicePreference::automatic),
			     doctest::Contains("got the same GPU (PCI 0000:01:00.0, GPU-a)"), AgreedError);
}

TEST_CASE("ranks that each see one GPU of their own all take their device 0")
{
	// Slurm --gpus-per-task or a per-rank CUDA_VISIBLE_DEVICES: one visible GPU per rank, a
	// different physical one on each.
	const Topology t(world().comm(), std::nullopt);
	GpuRuntimeInfo own;
	own.built = true;
	own.device_count = 1;
	own.device_ids = {fmt::format("PCI 0000:{:02x}:00.0, GPU-of-rank-{}", t.rank(), t.rank())};
	const Device d = choose_device(t, own, DevicePreference::automatic);
	CHECK(d.name() == "cuda:0");
	CHECK(physical_gpu(own, d) == own.device_ids[0]);
	CHECK(physical_gpu(own, Device{}) == "");
}

TEST_CASE("ranks that see all of a host's GPUs take one each, by host-local rank")
{
	const Topology t(world().comm(), std::nullopt);
	GpuRuntimeInfo all;
	all.built = true;
	all.device_count = t.host_local_size();
	for (int i = 0; i < all.device_count; ++i)
		all.device_ids.push_back(fmt::format("PCI 0000:{:02x}:00.0, GPU-{}", i, i));
	const Device d = choose_device(t, all, DevicePreference::cuda);
	CHECK(d.is_cuda());
	CHECK(d.index == t.host_local_rank());
	CHECK(choose_device(t, all, DevicePreference::cpu).name() == "cpu");
}

TEST_CASE("device preferences parse, and anything else is a clear error")
{
	CHECK(parse_device_preference("auto") == DevicePreference::automatic);
	CHECK(parse_device_preference("cuda") == DevicePreference::cuda);
	CHECK_THROWS_WITH_AS(parse_device_preference("gpu"), doctest::Contains("use auto, cpu or cuda"), AgreedError);
}
