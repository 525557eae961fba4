// libFuzzer target: --inject-delay "RANK:MS" for a job of 1 to 8 ranks.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/train_options.h"
#include "base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	if (size == 0)
		return 0;
	const int world_size = 1 + data[0] % 8;
	const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
	tower::StrategyOptions o;
	try {
		tower::cli::parse_delay(text, world_size, &o);
		// Accepted: a rank of this job and a finite, non-negative delay of at most an hour.
		if (o.inject_delay_rank < 0 || o.inject_delay_rank >= world_size || !(o.inject_delay_ms >= 0) ||
		    o.inject_delay_ms > 3.6e6)
			std::abort();
	} catch (const tower::Error&) {
	}
	return 0;
}
