// Streams and markers of a CUDA build: a per-thread stream choice, non-blocking side streams, events.
#include "base/device/stream.h"

#include <exception>
#include <utility>

#include "base/device/cuda_check.h"
#include "base/device/gpu_runtime.h"

namespace tower {

namespace {

// cudaStreamLegacy until the thread adopts a side stream: the stream every kernel used before
// threads could choose, which orders itself after (and before) all blocking streams' work.
thread_local cudaStream_t this_thread_stream = cudaStreamLegacy;

cudaStream_t native(void* stream)
{
	return static_cast<cudaStream_t>(stream);
}

cudaEvent_t native_event(void* event)
{
	return static_cast<cudaEvent_t>(event);
}

} // namespace

void* thread_stream()
{
	return this_thread_stream;
}

SideStream::SideStream(const Device& device) : device_(device)
{
	if (!device.is_cuda())
		return;
	select_gpu(device.index);
	cudaStream_t stream = nullptr;
	// Non-blocking: work on the legacy default stream (backward's kernels) does not wait for this
	// stream's work, nor this stream's for it; the order between them comes from markers only.
	TOWER_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	stream_ = stream;
}

SideStream::~SideStream()
{
	if (stream_) {
		cudaSetDevice(device_.index);
		cudaStreamDestroy(native(stream_));
	}
}

void SideStream::adopt_on_this_thread() const
{
	if (stream_)
		this_thread_stream = native(stream_);
}

SideStreamDrain::~SideStreamDrain() noexcept(false)
{
	if (!active_ || !device_.is_cuda())
		return;
	cudaSetDevice(device_.index);
	const cudaError_t rc = cudaStreamSynchronize(this_thread_stream);
	if (rc != cudaSuccess && std::uncaught_exceptions() == 0)
		TOWER_CUDA(rc);
}

StreamMarker::StreamMarker(const Device& device, bool timing) : device_(device)
{
	if (!device.is_cuda())
		return;
	select_gpu(device.index);
	cudaEvent_t event = nullptr;
	TOWER_CUDA(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
	event_ = event;
}

StreamMarker::~StreamMarker()
{
	release();
}

StreamMarker::StreamMarker(StreamMarker&& other) noexcept
	: device_(other.device_), event_(std::exchange(other.event_, nullptr))
{
}

StreamMarker& StreamMarker::operator=(StreamMarker&& other) noexcept
{
	if (this != &other) {
		release();
		device_ = other.device_;
		event_ = std::exchange(other.event_, nullptr);
	}
	return *this;
}

void StreamMarker::release() noexcept
{
	if (event_) {
		cudaSetDevice(device_.index);
		cudaEventDestroy(native_event(event_));
		event_ = nullptr;
	}
}

void StreamMarker::record()
{
	if (!event_)
		return;
	select_gpu(device_.index);
	TOWER_CUDA(cudaEventRecord(native_event(event_), this_thread_stream));
}

void StreamMarker::synchronize() const
{
	if (event_)
		TOWER_CUDA(cudaEventSynchronize(native_event(event_)));
}

void StreamMarker::make_thread_stream_wait() const
{
	if (!event_)
		return;
	select_gpu(device_.index);
	TOWER_CUDA(cudaStreamWaitEvent(this_thread_stream, native_event(event_), 0));
}

double StreamMarker::seconds_since(const StreamMarker& start) const
{
	if (!event_ || !start.event_)
		return 0;
	synchronize();
	float ms = 0;
	TOWER_CUDA(cudaEventElapsedTime(&ms, native_event(start.event_), native_event(event_)));
	return ms / 1000.0;
}

} // namespace tower
