// libFuzzer target: the small parsers of option values (range checks, names, schedules, TOWER_RANKS_PER_NODE).
#include <cfloat>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/options/names.h"
#include "runtime/options/run_fields.h"
#include "cli/option_style.h"
#include "collectives/all_reduce.h"
#include "collectives/reduce_op.h"
#include "models/model_factory.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "base/device/device.h"
#include "base/tensor/dtype.h"
#include "base/error.h"
#include "base/mpi/topology.h"

namespace {

template <typename Parse>
void either_parses_or_refuses(Parse parse)
{
	try {
		parse();
	} catch (const tower::Error&) {
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	const std::string text(reinterpret_cast<const char*>(data), size);
	tower::cli::range_problem(text, "INT:POSITIVE", 0, DBL_MAX, true);
	tower::cli::range_problem(text, "UINT", 0, DBL_MAX, false);
	tower::cli::range_problem(text, "FLOAT", -1.5, 2.5, false);
	either_parses_or_refuses([&] { tower::parse_dtype(text); });
	either_parses_or_refuses([&] { tower::parse_reduce_op(text); });
	either_parses_or_refuses([&] { tower::parse_all_reduce_mode(text); });
	either_parses_or_refuses([&] { tower::parse_precision(text); });
	either_parses_or_refuses([&] { tower::parse_device_preference(text); });
	either_parses_or_refuses([&] {
		tower::ScheduleConfig schedule;
		schedule.name = text;
		tower::make_schedule(schedule);
	});
	either_parses_or_refuses([&] {
		tower::OptimizerConfig optimizer;
		optimizer.name = text;
		tower::make_optimizer(optimizer, {});
	});
	if (text.find('\0') == std::string::npos) {
		setenv("TOWER_RANKS_PER_NODE", text.c_str(), 1);
		either_parses_or_refuses([] {
			const auto n = tower::ranks_per_node_setting(std::nullopt);
			if (n && *n <= 0)
				std::abort();
		});
	}
	return 0;
}
