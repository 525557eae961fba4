// libFuzzer target: the `groups` field's text, parsed and then validated for a job of 1 to 8 ranks.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "collectives/groups.h"
#include "runtime/options/run_fields.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	if (size == 0)
		return 0;
	const int world_size = 1 + data[0] % 8;
	const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
	try {
		const tower::GroupAssignment groups = tower::parse_groups(text);
		const int group_size = tower::validate_group_assignment(groups, world_size);
		// Accepted: every rank exactly once, in groups of the size returned.
		std::vector<int> seen(static_cast<size_t>(world_size), 0);
		for (const auto& g : groups) {
			if (static_cast<int>(g.size()) != group_size)
				std::abort();
			for (int r : g)
				if (r < 0 || r >= world_size || seen[static_cast<size_t>(r)]++)
					std::abort();
		}
		if (!groups.empty() && group_size * static_cast<int>(groups.size()) != world_size)
			std::abort();
	} catch (const tower::Error&) {
	}
	return 0;
}
