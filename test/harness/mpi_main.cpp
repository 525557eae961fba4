// The MPI-aware doctest entry point shared by every test binary.
#define DOCTEST_CONFIG_IMPLEMENT
#include "test/harness/mpi_main.h"

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "base/mpi/agree.h"
#include "base/device/gpu_runtime.h"

namespace tower::test {

namespace {

World* g_world = nullptr;

// The ranks on which a test case failed, gathered after each test case on every rank (all ranks
// run the same test cases in the same order, so this collective lines up).
std::vector<int> failing_ranks(bool failed_here)
{
	int size = 0;
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int flag = failed_here ? 1 : 0;
	std::vector<int> flags(static_cast<size_t>(size));
	MPI_Allgather(&flag, 1, MPI_INT, flags.data(), 1, MPI_INT, MPI_COMM_WORLD);
	std::vector<int> ranks;
	for (int r = 0; r < size; ++r)
		if (flags[static_cast<size_t>(r)])
			ranks.push_back(r);
	return ranks;
}

std::string join(const std::vector<int>& values)
{
	std::string out;
	for (int v : values)
		out += (out.empty() ? "" : ", ") + std::to_string(v);
	return out;
}

// Listens to every test case and reports, on rank 0, which ranks failed it.
class CrossRankVerdict : public doctest::IReporter {
public:
	explicit CrossRankVerdict(const doctest::ContextOptions&) {}

	void test_case_start(const doctest::TestCaseData& data) override { current_ = data.m_name; }
	void test_case_end(const doctest::CurrentTestCaseStats& stats) override
	{
		const auto ranks = failing_ranks(!stats.testCaseSuccess);
		if (ranks.empty())
			return;
		failed_cases_ += 1;
		int rank = 0;
		MPI_Comm_rank(MPI_COMM_WORLD, &rank);
		if (rank == 0)
			std::fprintf(stderr, "[mpi] test case '%s' failed on ranks: %s\n", current_.c_str(),
				     join(ranks).c_str());
	}
	void report_query(const doctest::QueryData&) override {}
	void test_run_start() override {}
	void test_run_end(const doctest::TestRunStats&) override {}
	void test_case_reenter(const doctest::TestCaseData&) override {}
	void test_case_exception(const doctest::TestCaseException&) override {}
	void subcase_start(const doctest::SubcaseSignature&) override {}
	void subcase_end() override {}
	void log_assert(const doctest::AssertData&) override {}
	void log_message(const doctest::MessageData&) override {}
	void test_case_skipped(const doctest::TestCaseData&) override {}

	static int failed_cases() { return failed_cases_; }

private:
	std::string current_;
	static inline int failed_cases_ = 0;
};

REGISTER_LISTENER("cross_rank_verdict", 1, CrossRankVerdict);

// Prints what another rank's console reporter wrote, each line marked with the rank.
void print_marked(int rank, const std::string& text)
{
	std::istringstream lines(text);
	std::string line;
	std::string out;
	while (std::getline(lines, line))
		out += fmt::format("[rank {}] {}\n", rank, line);
	std::fputs(out.c_str(), stderr);
	std::fflush(stderr);
}

// The ranks sharing this rank's host, and this rank's place among them.
std::pair<int, int> host_local_rank_and_size()
{
	MPI_Comm host = MPI_COMM_NULL;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
	int rank = 0, size = 1;
	MPI_Comm_rank(host, &rank);
	MPI_Comm_size(host, &size);
	MPI_Comm_free(&host);
	return {rank, size};
}

// Every rank needs a GPU of its own (NCCL refuses two ranks on one GPU): with fewer GPUs than
// ranks on a host, as under mpirun -np 2 on a one-GPU machine, the test skips.
bool gpu_for_every_rank(int rank)
{
	const GpuRuntimeInfo gpus = probe_gpu_runtime();
	const auto [local_rank, local_size] = host_local_rank_and_size();
	const bool everywhere = all_true(MPI_COMM_WORLD, gpus.device_count >= local_size);
	if (!everywhere && rank == 0)
		std::printf("SKIP: a GPU test needs a GPU of its own for every rank (rank 0: %d rank(s) on its host, "
			    "%d GPU(s) visible%s%s)\n",
			    local_size, gpus.device_count, gpus.device_count > 0 ? "" : ": ", gpus.why_none.c_str());
	if (everywhere)
		select_gpu(local_rank);
	return everywhere;
}

} // namespace

World& world()
{
	return *g_world;
}

int run_tests(int argc, char** argv, bool needs_gpu)
{
	World the_world(&argc, &argv);
	g_world = &the_world;
	const int rank = the_world.rank();
	if (needs_gpu && !gpu_for_every_rank(rank))
		return 77;

	doctest::Context context;
	context.applyCommandLine(argc, argv);
	// Only rank 0 writes the normal report; the others keep theirs and show it if they failed.
	std::ostringstream other_rank_report;
	if (rank != 0) {
		context.setCout(&other_rank_report);
		context.setOption("no-colors", true);
		context.setOption("no-version", true);
	}
	const int local = context.run();
	if (rank != 0 && local != 0)
		print_marked(rank, other_rank_report.str());

	const auto ranks = failing_ranks(local != 0);
	if (rank == 0)
		std::printf("[mpi] %d rank(s): %s\n", the_world.size(),
			    ranks.empty() ? "all passed"
					  : fmt::format("{} failing test case(s), failures on ranks: {}",
							CrossRankVerdict::failed_cases(), join(ranks))
						    .c_str());
	std::fflush(stdout);
	g_world = nullptr;
	return ranks.empty() ? 0 : 1;
}

} // namespace tower::test
