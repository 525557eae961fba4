// tower train's report of a run: the library's usual one and the elastic launcher's lines.
#include "cli/train/train_report.h"

namespace tower::cli {

TrainReport::TrainReport(MPI_Comm comm, const std::string& metrics_path) : RunReport(comm, metrics_path) {}

void TrainReport::started(int64_t step, bool resumed)
{
	RunReport::started(step, resumed);
	launcher_.started(step, resumed);
}

void TrainReport::stepped(int64_t step)
{
	RunReport::stepped(step);
	launcher_.stepped(step);
}

} // namespace tower::cli
