// timeline_span_cost: what one timeline::Span with three args costs, recording and not recording.
// Build against an installed tower and run on one rank:
//   g++ -O2 scripts/bench/timeline_span_cost.cpp $(pkg-config --cflags --libs tower) -o span_cost
//   ./span_cost /tmp/span_cost.json        # writes ~140 MB of events there, then removes them
#include <chrono>
#include <cstdio>
#include <string>

#include "base/mpi/world.h"
#include "runtime/observe/timeline.h"

namespace {

// Nanoseconds per span, like the all-reduce spans of the replicated strategy.
double ns_per_span(int spans)
{
	const auto start = std::chrono::steady_clock::now();
	for (int i = 0; i < spans; ++i) {
		tower::timeline::Span span("all-reduce", "comm");
		span.arg("bucket", i).arg("bytes", 4096).arg("mode", "ring");
	}
	const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
	return took.count() / spans;
}

} // namespace

int main(int argc, char** argv)
{
	tower::World world(&argc, &argv);
	const std::string path = argc > 1 ? argv[1] : "span_cost.json";
	const int spans = 1000000;
	const double idle = ns_per_span(spans);
	tower::timeline::start(world.comm(), path);
	const double recording = ns_per_span(spans);
	tower::timeline::finish(world.comm());
	std::remove(path.c_str());
	std::printf("timeline::Span with 3 args: %.1f ns when not recording, %.1f ns when recording (%d spans)\n", idle,
		    recording, spans);
}
