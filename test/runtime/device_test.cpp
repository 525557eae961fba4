// Tests of device assignment on machines with and without GPUs.
#include <doctest/doctest.h>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
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
}

TEST_CASE("device preferences parse, and anything else is a clear error")
{
	CHECK(parse_device_preference("auto") == DevicePreference::automatic);
	CHECK(parse_device_preference("cuda") == DevicePreference::cuda);
	CHECK_THROWS_WITH_AS(parse_device_preference("gpu"), doctest::Contains("use auto, cpu or cuda"), AgreedError);
}
