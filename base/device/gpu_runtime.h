// What the CUDA side of this build can see: device count and library versions.
#pragma once

#include <string>
#include <vector>

namespace tower {

struct GpuRuntimeInfo {
	bool built = false;             // tower was built with CUDA, cuBLAS and NCCL
	int device_count = 0;           // visible CUDA devices (0 when none or no driver)
	std::string why_none;           // when device_count is 0: what the CUDA runtime said
	std::string cuda_runtime = "not built";
	std::string cuda_driver = "not built";
	std::string cublas = "not built";
	std::string nccl = "not built";
	std::vector<std::string> device_names;
	// Per visible device: which physical GPU it is, "PCI <bus id>, <UUID>" (visible indices
	// are renumbered by CUDA_VISIBLE_DEVICES; these are not).
	std::vector<std::string> device_ids;
};

// Asks the CUDA runtime what it sees. Never throws: a machine without a driver has 0 devices.
GpuRuntimeInfo probe_gpu_runtime();

// Makes `index` the current CUDA device of this thread; throws tower::Error on failure.
void select_gpu(int index);

} // namespace tower
