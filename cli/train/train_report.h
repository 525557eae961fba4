// tower train's report of a run: the library's usual one (progress, the metrics file) and, under
// `tower elastic`, the lines its launcher reads (cli/elastic/elastic_job.h).
#pragma once

#include <string>

#include "runtime/observe/launcher_lines.h"
#include "runtime/observe/run_report.h"

namespace tower::cli {

class TrainReport : public RunReport {
public:
	// Collective over `comm` (the metrics file is opened on rank 0). Under an elastic launcher
	// it also says where the run starts and each step it completes (LauncherLines).
	TrainReport(MPI_Comm comm, const std::string& metrics_path);

	void started(int64_t step, bool resumed) override;
	void stepped(int64_t step) override;

private:
	LauncherLines launcher_;
};

} // namespace tower::cli
