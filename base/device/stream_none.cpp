// Streams and markers of a CPU-only build: there is no stream, and every marker is reached at once.
#include "base/device/stream.h"

#include "base/device/cpu_only.h"
#include "base/error.h"

namespace tower {

void* thread_stream()
{
	return nullptr;
}

SideStream::SideStream(const Device& device) : device_(device)
{
	require_cpu_build(device);
}

SideStream::~SideStream() = default;

void SideStream::adopt_on_this_thread() const {}

SideStreamDrain::~SideStreamDrain() noexcept(false) {}

StreamMarker::StreamMarker(const Device& device, bool) : device_(device)
{
	require_cpu_build(device);
}

StreamMarker::~StreamMarker() = default;
StreamMarker::StreamMarker(StreamMarker&&) noexcept = default;
StreamMarker& StreamMarker::operator=(StreamMarker&&) noexcept = default;

void StreamMarker::record() {}
void StreamMarker::synchronize() const {}
void StreamMarker::make_thread_stream_wait() const {}

double StreamMarker::seconds_since(const StreamMarker&) const
{
	return 0;
}

void StreamMarker::release() noexcept {}

} // namespace tower
