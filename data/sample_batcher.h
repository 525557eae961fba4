// Gathers a rank's shard of any sample set into a batch of tensors on its device, reusing the buffers.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/device/device.h"
#include "base/device/stream.h"
#include "base/tensor/batch.h"
#include "base/tensor/memory.h"
#include "data/sample_set.h"

namespace tower {

class SampleBatcher {
public:
	// `samples` must outlive the batcher. Allocates the batch's tensors ([batch] + each field's
	// shape) once, and host staging buffers for a GPU device.
	SampleBatcher(const SampleSet& samples, int64_t batch, const Device& device);

	// Fills the batch with the samples at `indices` (exactly `batch` of them, each in range) and
	// returns it. The tensors are the same ones every call: the next call overwrites them. On a
	// GPU the upload is queued on this thread's stream, after the work that read the last batch,
	// and the call returns without waiting for it.
	const Batch& assemble(std::span<const int64_t> indices);

	// Waits for the uploads in flight before their staging memory goes.
	~SampleBatcher();
	SampleBatcher(SampleBatcher&&) = default;
	SampleBatcher& operator=(SampleBatcher&&) = delete;

private:
	// On a GPU, samples are gathered into pinned host memory, then uploaded without a wait. There
	// are two sets, used in turn, so that a batch is gathered while the last one's upload may
	// still be queued; `uploaded` tells when a set may be written again.
	struct Staging {
		std::vector<std::unique_ptr<void, PinnedHostFree>> fields;
		StreamMarker uploaded;
	};

	const SampleSet& samples_;
	std::vector<SampleField> fields_;
	int64_t batch_;
	Batch tensors_;
	std::array<Staging, 2> staging_; // empty on the CPU, where samples go straight to the tensors
	size_t next_staging_ = 0;
};

} // namespace tower
