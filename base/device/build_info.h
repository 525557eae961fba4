// What this binary was built with and runs on: tower, MPI, CUDA libraries (the CPU
// kernels' library is reported by models/kernels/cpu/cpu_threads.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/device/gpu_runtime.h"
#include "base/mpi/world.h"

namespace tower {

struct BuildInfo {
	std::string tower_version;
	std::string mpi_library;  // MPI_Get_library_version, first line
	std::string mpi_standard; // "3.1"
	std::string thread_level;
	GpuRuntimeInfo gpu;
};

BuildInfo collect_build_info(const World& world);

nlohmann::json to_json(const BuildInfo& info);

} // namespace tower
