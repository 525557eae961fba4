// What this binary was built with and runs on: tower, MPI, CUDA libraries.
#include "base/device/build_info.h"

#include <mpi.h>

#include "tower_config.h"

namespace tower {

namespace {

std::string first_line(const char* text)
{
	std::string s(text);
	const auto end = s.find('\n');
	if (end != std::string::npos)
		s.resize(end);
	while (!s.empty() && (s.back() == ',' || s.back() == ' '))
		s.pop_back();
	return s;
}

} // namespace

BuildInfo collect_build_info(const World& world)
{
	BuildInfo info;
	info.tower_version = TOWER_VERSION;
	char library[MPI_MAX_LIBRARY_VERSION_STRING];
	int length = 0;
	MPI_Get_library_version(library, &length);
	info.mpi_library = first_line(library);
	int major = 0, minor = 0;
	MPI_Get_version(&major, &minor);
	info.mpi_standard = std::to_string(major) + "." + std::to_string(minor);
	info.thread_level = thread_level_name(world.thread_level());
	info.gpu = probe_gpu_runtime();
	return info;
}

nlohmann::json to_json(const BuildInfo& info)
{
	return {
		{"tower_version", info.tower_version},
		{"mpi_library", info.mpi_library},
		{"mpi_standard", info.mpi_standard},
		{"mpi_thread_level", info.thread_level},
		{"cuda_built", info.gpu.built},
		{"cuda_runtime", info.gpu.cuda_runtime},
		{"cuda_driver", info.gpu.cuda_driver},
		{"cublas", info.gpu.cublas},
		{"nccl", info.gpu.nccl},
		{"gpu_count", info.gpu.device_count},
	};
}

} // namespace tower
