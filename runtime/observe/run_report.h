// The usual report of a training run: rank 0's progress on standard output and its metrics file.
#pragma once

#include <string>

#include <mpi.h>

#include "runtime/observe/metrics_log.h"
#include "runtime/observe/progress.h"
#include "runtime/observe/training_observer.h"

namespace tower {

// Progress as a live line on a terminal and plain lines otherwise; metrics as JSON lines in
// `metrics_path` (runtime/observe/metrics_log.h), renamed into place with the summary.
class RunReport : public TrainingObserver {
public:
	// Collective over `comm`: rank 0 opens the metrics file (empty path: none), and a failure
	// there is an error on every rank. Other ranks print and write nothing.
	RunReport(MPI_Comm comm, const std::string& metrics_path);

	void progressed(const ProgressState& state) override;
	void said(const std::string& line) override;
	void recorded(const nlohmann::json& line) override;
	void finished(const nlohmann::json& summary) override;

private:
	Progress progress_;
	MetricsLog metrics_;
};

} // namespace tower
