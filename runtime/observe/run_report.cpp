// The usual report of a training run: rank 0's progress on standard output and its metrics file.
#include "runtime/observe/run_report.h"

#include "base/error.h"
#include "base/field_spelling.h"
#include "base/mpi/agree.h"

namespace tower {

namespace {

int rank_of(MPI_Comm comm)
{
	int rank = 0;
	MPI_Comm_rank(comm, &rank);
	return rank;
}

// Rank 0 opens the metrics file; a failure there becomes an error on every rank.
MetricsLog open_metrics(MPI_Comm comm, const std::string& path)
{
	MetricsLog log;
	std::string problem;
	if (rank_of(comm) == 0 && !path.empty()) {
		try {
			log = MetricsLog(path);
		} catch (const Error& e) {
			problem = e.what();
		}
	}
	agree(comm, problem);
	return log;
}

} // namespace

RunReport::RunReport(MPI_Comm comm, const std::string& metrics_path)
	: progress_(rank_of(comm) == 0, stdout_is_terminal()), metrics_(open_metrics(comm, metrics_path))
{
}

void RunReport::progressed(const ProgressState& state)
{
	progress_.update(state);
}

void RunReport::said(const std::string& line)
{
	progress_.say(spelled(line));
}

void RunReport::recorded(const nlohmann::json& line)
{
	metrics_.write(line);
}

void RunReport::finished(const nlohmann::json& summary)
{
	metrics_.write(summary);
	metrics_.finish();
}

} // namespace tower
