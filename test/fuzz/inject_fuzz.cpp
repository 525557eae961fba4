// libFuzzer target: --inject-nonfinite "STEP[:RANK]" for a job of 1 to 8 ranks.
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
	tower::GradientOptions o;
	try {
		tower::cli::parse_injection(text, world_size, &o);
		// Accepted: a step counted from 0 and a rank of this job.
		if (o.inject_nonfinite_step < 0 || o.inject_nonfinite_rank < 0 || o.inject_nonfinite_rank >= world_size)
			std::abort();
	} catch (const tower::Error&) {
	}
	return 0;
}
