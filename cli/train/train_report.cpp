// tower train's report of a run: the library's usual one and the elastic launcher's lines.
#include "cli/train/train_report.h"

#include <cstdio>

#include <fmt/format.h>

#include "cli/elastic/elastic_job.h"

namespace tower::cli {

TrainReport::TrainReport(MPI_Comm comm, const std::string& metrics_path, bool elastic_lines)
	: RunReport(comm, metrics_path), elastic_lines_(elastic_lines)
{
}

void TrainReport::started(int64_t step, bool resumed)
{
	elastic_line(resumed ? fmt::format("resumed {}", step) : std::string("started"));
}

void TrainReport::stepped(int64_t step)
{
	elastic_line(fmt::format("step {}", step));
}

// The trainer calls its observer on rank 0 only: one line per event for the launcher.
void TrainReport::elastic_line(const std::string& what) const
{
	if (!elastic_lines_)
		return;
	std::fprintf(stdout, "%s%s\n", elastic_line_prefix, what.c_str());
	std::fflush(stdout);
}

} // namespace tower::cli
