// Gathers a rank's shard of any sample set into a batch of tensors on its device, reusing the buffers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/device/device.h"
#include "base/tensor/batch.h"
#include "data/sample_set.h"

namespace tower {

class SampleBatcher {
public:
	// `samples` must outlive the batcher. Allocates the batch's tensors ([batch] + each field's
	// shape) once, and host staging buffers for a GPU device.
	SampleBatcher(const SampleSet& samples, int64_t batch, const Device& device);

	// Fills the batch with the samples at `indices` (exactly `batch` of them, each in range) and
	// returns it. The tensors are the same ones every call: the next call overwrites them.
	const Batch& assemble(std::span<const int64_t> indices);

private:
	const SampleSet& samples_;
	std::vector<SampleField> fields_;
	int64_t batch_;
	Batch tensors_;
	// Where samples are gathered: the tensors themselves on the CPU, host staging on a GPU.
	std::vector<std::vector<char>> staged_;
};

} // namespace tower
