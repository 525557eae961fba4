// Where a host thread's GPU work goes, and markers in it: CUDA streams and events behind types that
// the CPU-only build has too.
#pragma once

#include "base/device/device.h"
#include "base/device/thread_stream.h"

namespace tower {

// A CUDA stream of one GPU that neither waits for the legacy default stream nor makes it wait. The
// communication thread adopts one, so the casts and collectives of a bucket run beside the rest of
// backward instead of queuing behind it. On the CPU, an object that does nothing.
class SideStream {
public:
	explicit SideStream(const Device& device);
	~SideStream();
	SideStream(const SideStream&) = delete;
	SideStream& operator=(const SideStream&) = delete;

	// Makes this stream the calling thread's thread_stream() for as long as the thread lives or
	// until another adopt; the stream must outlive the thread's use of it.
	void adopt_on_this_thread() const;

private:
	Device device_;
	// Unread in a build without CUDA, whose stand-ins do nothing.
	[[maybe_unused]] void* stream_ = nullptr;
};

// Waits, when it goes out of scope, for the work queued on the calling thread's stream, when
// `active`: a job on a side stream ends only once its work is done, whether it returns or throws.
// A failure to wait while an exception unwinds is left to that exception.
class SideStreamDrain {
public:
	SideStreamDrain(const Device& device, bool active) : device_(device), active_(active) {}
	~SideStreamDrain() noexcept(false);
	SideStreamDrain(const SideStreamDrain&) = delete;
	SideStreamDrain& operator=(const SideStreamDrain&) = delete;

private:
	Device device_;
	[[maybe_unused]] bool active_; // unread without CUDA
};

// A marker in the stream of the thread that records it: what was queued there before record() is
// done once the marker is reached. Other work waits for it on the host (synchronize) or on the
// waiting thread's own stream, without the host (make_thread_stream_wait). With `timing`, the
// GPU's clock between two markers is read. On the CPU every call returns at once.
class StreamMarker {
public:
	StreamMarker() = default;
	explicit StreamMarker(const Device& device, bool timing = false);
	~StreamMarker();
	StreamMarker(StreamMarker&& other) noexcept;
	StreamMarker& operator=(StreamMarker&& other) noexcept;
	StreamMarker(const StreamMarker&) = delete;
	StreamMarker& operator=(const StreamMarker&) = delete;

	void record();
	void synchronize() const;
	void make_thread_stream_wait() const;
	// Seconds on the GPU's clock from `start` to this marker, both recorded with timing; waits
	// until this one is reached. 0 on the CPU.
	double seconds_since(const StreamMarker& start) const;

private:
	void release() noexcept;

	Device device_;
	[[maybe_unused]] void* event_ = nullptr; // unread without CUDA
};

} // namespace tower
