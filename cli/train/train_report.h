// tower train's report of a run: the library's usual one (progress, the metrics file) and, under
// `tower elastic`, the lines its launcher reads (cli/elastic/elastic_job.h).
#pragma once

#include <string>

#include "runtime/observe/run_report.h"

namespace tower::cli {

class TrainReport : public RunReport {
public:
	// Collective over `comm` (the metrics file is opened on rank 0). `elastic_lines`: under an
	// elastic launcher, say where the run starts and each step it completes.
	TrainReport(MPI_Comm comm, const std::string& metrics_path, bool elastic_lines);

	void started(int64_t step, bool resumed) override;
	void stepped(int64_t step) override;

private:
	void elastic_line(const std::string& what) const;

	bool elastic_lines_;
};

} // namespace tower::cli
