// Gathers a rank's shard of any sample set into a batch of tensors on its device, reusing the buffers.
#include "data/sample_batcher.h"

#include <exception>

#include "base/error.h"
#include "base/tensor/memory.h"

namespace tower {

int64_t SampleField::bytes() const
{
	int64_t n = 1;
	for (int64_t d : shape)
		n *= d;
	return n * static_cast<int64_t>(dtype_size(dtype));
}

SampleBatcher::SampleBatcher(const SampleSet& samples, int64_t batch, const Device& device)
	: samples_(samples), fields_(samples.fields()), batch_(batch)
{
	if (batch <= 0)
		throw AgreedError(fmt::format("batch size {} must be positive", batch));
	for (const SampleField& f : fields_) {
		Shape shape = {batch};
		shape.insert(shape.end(), f.shape.begin(), f.shape.end());
		tensors_.tensors.push_back({f.name, Tensor::empty(shape, f.dtype, device)});
		if (device.is_cuda())
			for (Staging& s : staging_)
				s.fields.emplace_back(pinned_host_alloc(device, static_cast<size_t>(batch * f.bytes())),
						      PinnedHostFree{device});
	}
	if (device.is_cuda())
		for (Staging& s : staging_)
			s.uploaded = StreamMarker(device);
}

SampleBatcher::~SampleBatcher()
{
	for (const Staging& s : staging_) {
		try {
			s.uploaded.synchronize();
		} catch (const std::exception&) {
			// A sticky CUDA error: nothing is in flight any more that could read the memory.
		}
	}
}

const Batch& SampleBatcher::assemble(std::span<const int64_t> indices)
{
	TOWER_CHECK_EQ(static_cast<int64_t>(indices.size()), batch_, "samples given to the batch assembler");
	Staging* staging = nullptr;
	if (!staging_[0].fields.empty()) {
		staging = &staging_[next_staging_];
		next_staging_ = 1 - next_staging_;
		// Its last upload, two batches ago, must have read it before it is written again.
		staging->uploaded.synchronize();
	}
	std::vector<char*> base;
	for (size_t f = 0; f < fields_.size(); ++f)
		base.push_back(static_cast<char*>(staging ? staging->fields[f].get() : tensors_.tensors[f].tensor.data()));
	std::vector<void*> at(fields_.size());
	for (size_t i = 0; i < indices.size(); ++i) {
		const int64_t s = indices[i];
		TOWER_CHECK(s >= 0 && s < samples_.size(), "sample index {} outside a data set of {}", s, samples_.size());
		for (size_t f = 0; f < fields_.size(); ++f)
			at[f] = base[f] + static_cast<int64_t>(i) * fields_[f].bytes();
		samples_.copy_sample(s, at);
	}
	if (staging) {
		for (size_t f = 0; f < fields_.size(); ++f) {
			Tensor& t = tensors_.tensors[f].tensor;
			upload_bytes_async(t.data(), t.device(), staging->fields[f].get(), t.bytes());
		}
		staging->uploaded.record();
	}
	return tensors_;
}

} // namespace tower
