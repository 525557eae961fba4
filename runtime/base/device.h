// Which device each rank's tower runs on: a CUDA device chosen by local rank, or the CPU.
#pragma once

#include <string>

#include "runtime/base/gpu_runtime.h"
#include "runtime/base/topology.h"

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

// Parses "auto", "cpu" or "cuda"; throws tower::AgreedError on anything else.
DevicePreference parse_device_preference(const std::string& text);

// Reads TOWER_DEVICE (auto|cpu|cuda), defaulting to auto.
DevicePreference device_preference_from_env();

// Collective over the topology's world. The rank L-th on its host gets CUDA device L when GPUs are visible
// and wanted; otherwise the CPU. Throws tower::AgreedError on every rank, naming the counts,
// when a host has more ranks than GPUs, or when CUDA was asked for and none is visible.
// Makes the chosen GPU current for the calling thread.
Device assign_device(const Topology& topology, const GpuRuntimeInfo& gpus, DevicePreference preference);

} // namespace tower
