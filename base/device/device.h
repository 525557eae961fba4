// Which device each rank's tower runs on: a CUDA device chosen by the rank's place on its host, or the CPU.
#pragma once

#include <string>

#include "base/device/gpu_runtime.h"
#include "base/mpi/topology.h"

namespace tower {

enum class DeviceKind { cpu, cuda };

struct Device {
	DeviceKind kind = DeviceKind::cpu;
	int index = 0; // CUDA device index; 0 for the CPU

	bool is_cuda() const { return kind == DeviceKind::cuda; }
	std::string name() const; // "cpu" or "cuda:N"
};

// What the user asked for: the default picks a GPU when one is visible.
enum class DevicePreference { automatic, cpu, cuda };

// Collective over the topology's world. The rank L-th on its host gets visible CUDA device
// L modulo the visible count when GPUs are visible and wanted (so ranks that each see one GPU of
// their own, as with Slurm --gpus-per-task or a per-rank CUDA_VISIBLE_DEVICES, take device 0);
// otherwise the CPU. Throws tower::AgreedError on every rank when two ranks of a host would
// drive the same physical GPU (naming the counts), or when CUDA was asked for and none is
// visible. Selects nothing.
Device choose_device(const Topology& topology, const GpuRuntimeInfo& gpus, DevicePreference preference);

// choose_device, then makes the chosen GPU current for the calling thread.
Device assign_device(const Topology& topology, const GpuRuntimeInfo& gpus, DevicePreference preference);

// Which physical GPU `device` is ("PCI <bus id>, <UUID>" from gpus.device_ids); empty for the CPU.
std::string physical_gpu(const GpuRuntimeInfo& gpus, const Device& device);

} // namespace tower
