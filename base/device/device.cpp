// Which device each rank's tower runs on: a CUDA device chosen by the rank's place on its host, or the CPU.
#include "base/device/device.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/ranges.h>

#include "base/mpi/agree.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"

namespace tower {

std::string Device::name() const
{
	return is_cuda() ? fmt::format("cuda:{}", index) : "cpu";
}

namespace {

std::string device_problem(const GpuRuntimeInfo& gpus, DevicePreference preference)
{
	if (preference != DevicePreference::cuda || gpus.device_count > 0)
		return {};
	return fmt::format("CUDA was asked for but no GPU is usable ({}); use `device` cpu", gpus.why_none);
}

// Every rank's "host<TAB>physical GPU" (empty GPU for the CPU), so each can see who else drives its GPU.
std::vector<std::string> gpus_of_all_ranks(MPI_Comm world, const std::string& mine)
{
	constexpr int width = 256;
	char host[MPI_MAX_PROCESSOR_NAME] = {};
	int host_length = 0;
	MPI_Get_processor_name(host, &host_length);
	std::vector<char> row(width, '\0');
	const std::string text = fmt::format("{}\t{}", std::string(host, static_cast<size_t>(host_length)), mine);
	std::copy_n(text.begin(), std::min<size_t>(text.size(), width - 1), row.begin());
	int size = 1;
	MPI_Comm_size(world, &size);
	std::vector<char> all(static_cast<size_t>(size) * width);
	TOWER_MPI(MPI_Allgather(row.data(), width, MPI_CHAR, all.data(), width, MPI_CHAR, world));
	std::vector<std::string> rows;
	for (int r = 0; r < size; ++r)
		rows.emplace_back(all.data() + static_cast<size_t>(r) * width);
	return rows;
}

// Two ranks on one GPU would share its memory and NCCL refuses them; say which and why.
std::string shared_gpu_problem(const Topology& topology, const GpuRuntimeInfo& gpus, const Device& device)
{
	const std::string mine = device.is_cuda() ? physical_gpu(gpus, device) : std::string();
	const auto rows = gpus_of_all_ranks(topology.world(), mine);
	if (!device.is_cuda())
		return {};
	std::vector<int> sharing;
	for (int r = 0; r < static_cast<int>(rows.size()); ++r)
		if (r != topology.rank() && rows[static_cast<size_t>(r)] == rows[static_cast<size_t>(topology.rank())])
			sharing.push_back(r);
	if (sharing.empty())
		return {};
	return fmt::format("this host runs {} ranks but sees only {} GPU(s) per rank, and rank(s) {} got the same "
			   "GPU ({}); start at most {} ranks per host, give each rank GPUs of its own "
			   "(CUDA_VISIBLE_DEVICES, Slurm --gpus-per-task), or use `device` cpu",
			   topology.host_local_size(), gpus.device_count, fmt::join(sharing, ", "), mine,
			   gpus.device_count);
}

} // namespace

std::string physical_gpu(const GpuRuntimeInfo& gpus, const Device& device)
{
	if (!device.is_cuda())
		return {};
	const auto i = static_cast<size_t>(device.index);
	return i < gpus.device_ids.size() ? gpus.device_ids[i] : fmt::format("visible device {}", device.index);
}

Device choose_device(const Topology& topology, const GpuRuntimeInfo& gpus, DevicePreference preference)
{
	agree(topology.world(), device_problem(gpus, preference));
	Device device;
	if (preference != DevicePreference::cpu && gpus.device_count > 0) {
		device.kind = DeviceKind::cuda;
		// Modulo: ranks that each see one GPU of their own all take their device 0; ranks that
		// see all of a host's GPUs take one each.
		device.index = topology.host_local_rank() % gpus.device_count;
	}
	agree(topology.world(), shared_gpu_problem(topology, gpus, device));
	return device;
}

Device assign_device(const Topology& topology, const GpuRuntimeInfo& gpus, DevicePreference preference)
{
	const Device device = choose_device(topology, gpus, preference);
	if (device.is_cuda())
		select_gpu(device.index);
	return device;
}

} // namespace tower
