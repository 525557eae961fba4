// Which device each rank's tower runs on: a CUDA device chosen by local rank, or the CPU.
#include "runtime/base/device.h"

#include <cstdlib>

#include "runtime/base/agree.h"
#include "runtime/base/error.h"

namespace tower {

std::string Device::name() const
{
	return is_cuda() ? fmt::format("cuda:{}", index) : "cpu";
}

DevicePreference parse_device_preference(const std::string& text)
{
	if (text == "auto")
		return DevicePreference::automatic;
	if (text == "cpu")
		return DevicePreference::cpu;
	if (text == "cuda")
		return DevicePreference::cuda;
	throw AgreedError(fmt::format("unknown device '{}': use auto, cpu or cuda", text));
}

DevicePreference device_preference_from_env()
{
	const char* env = std::getenv("TOWER_DEVICE");
	return env && *env ? parse_device_preference(env) : DevicePreference::automatic;
}

namespace {

std::string device_problem(const Topology& topology, const GpuRuntimeInfo& gpus, DevicePreference preference)
{
	if (preference == DevicePreference::cpu)
		return {};
	if (gpus.device_count == 0)
		return preference == DevicePreference::cuda
			       ? fmt::format("CUDA was asked for but no GPU is usable ({}); use --device cpu",
					     gpus.why_none)
			       : std::string();
	if (topology.host_local_rank() >= gpus.device_count)
		return fmt::format("this host runs {} ranks but sees only {} GPU(s); start at most {} ranks "
				   "per host, or use --device cpu",
				   topology.host_local_size(), gpus.device_count, gpus.device_count);
	return {};
}

} // namespace

Device assign_device(const Topology& topology, const GpuRuntimeInfo& gpus, DevicePreference preference)
{
	agree(topology.world(), device_problem(topology, gpus, preference));
	Device device;
	if (preference != DevicePreference::cpu && gpus.device_count > 0) {
		device.kind = DeviceKind::cuda;
		device.index = topology.host_local_rank();
		select_gpu(device.index);
	}
	return device;
}

} // namespace tower
