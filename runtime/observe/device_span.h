// Timeline spans of GPU work measured by the GPU's own clock, not by the host's launches.
#pragma once

#include "base/device/device.h"
#include "base/device/stream.h"

namespace tower::timeline {

// A span of the work that the calling thread queues on its stream between begin() and end(),
// for work that returns before its kernels ran (a Span around it would show the launches). The
// GPU's clock gives the duration; the start is the host's clock at begin(), which is right only
// when nothing is pending on the stream then (begin() right after a read that waited for it).
// The event is written once the end is reached: at the next begin(), at flush() (which waits),
// or when the timeline finishes (timeline::finish() flushes every DeviceSpan). On the CPU, or without a recording, it does nothing: a Span measures CPU work.
class DeviceSpan {
public:
	DeviceSpan(const Device& device, const char* name, const char* category);
	~DeviceSpan();
	DeviceSpan(const DeviceSpan&) = delete;
	DeviceSpan& operator=(const DeviceSpan&) = delete;

	void begin();
	void end();
	// Writes the span still pending, waiting for its end if need be.
	void flush();

private:
	// flush(), saying on stderr why a span was lost instead of throwing (a sticky CUDA error).
	void flush_or_say() noexcept;

	Device device_;
	const char* name_;
	const char* category_;
	StreamMarker start_, stop_;
	int generation_ = -1;   // the recording the pending span began in; negative: none pending
	double start_us_ = 0;   // the host's clock at begin()
	bool ended_ = false;
	int before_finish_ = -1; // the handle of the flush that timeline::finish() runs
};

} // namespace tower::timeline
