// Timeline spans of GPU work measured by the GPU's own clock, not by the host's launches.
#include "runtime/observe/device_span.h"

#include <cstdio>
#include <exception>
#include <string>

#include "runtime/observe/timeline.h"

namespace tower::timeline {

DeviceSpan::DeviceSpan(const Device& device, const char* name, const char* category)
	: device_(device), name_(name), category_(category)
{
	if (device.is_cuda()) {
		start_ = StreamMarker(device, true);
		stop_ = StreamMarker(device, true);
		// The last span of a run is still pending when the timeline finishes.
		before_finish_ = detail::add_before_finish([this] { flush_or_say(); });
	}
}

DeviceSpan::~DeviceSpan()
{
	if (before_finish_ >= 0)
		detail::remove_before_finish(before_finish_);
	flush_or_say();
}

void DeviceSpan::flush_or_say() noexcept
{
	try {
		flush();
	} catch (const std::exception& e) {
		std::fprintf(stderr, "tower: the timeline's '%s' span of the GPU was lost: %s\n", name_, e.what());
	}
}

void DeviceSpan::begin()
{
	flush();
	if (!device_.is_cuda() || !enabled())
		return;
	generation_ = detail::generation();
	start_us_ = detail::now_us();
	ended_ = false;
	start_.record();
}

void DeviceSpan::end()
{
	if (generation_ < 0 || ended_)
		return;
	stop_.record();
	ended_ = true;
}

void DeviceSpan::flush()
{
	if (generation_ < 0)
		return;
	const int generation = generation_;
	generation_ = -1;
	if (!ended_)
		return; // begun but never ended (an exception in between): nothing to measure
	const double gpu_us = stop_.seconds_since(start_) * 1e6;
	detail::write_complete(name_, category_, generation, start_us_, start_us_ + gpu_us,
			       std::string("\"clock\": \"gpu\""));
}

} // namespace tower::timeline
