// Streams and markers of a CPU-only build: there is no stream, and every marker is reached at once.
#include "base/device/stream.h"

#include "base/error.h"

namespace tower {

namespace {

void require_cpu(const Device& device)
{
	if (device.is_cuda())
		throw Error(fmt::format("device {} used, but tower was built without CUDA; rebuild with "
					"-Dcuda=enabled",
					device.name()));
}

} // namespace

void* thread_stream()
{
	return nullptr;
}

SideStream::SideStream(const Device& device) : device_(device)
{
	require_cpu(device);
}

SideStream::~SideStream() = default;

void SideStream::adopt_on_this_thread() const {}

SideStreamDrain::~SideStreamDrain() noexcept(false) {}

StreamMarker::StreamMarker(const Device& device, bool) : device_(device)
{
	require_cpu(device);
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
