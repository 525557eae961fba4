// The async and sync-replicas owners' own checkpoints: each owner saves its share right after an
// update on its own thread, and rank 0 writes the manifest once every owner's file is durable.
#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/ranges.h>

#include "base/mpi/agree.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_file.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/durable_file.h"
#include "runtime/checkpoint/owner_snapshot.h"

namespace tower {

namespace fs = std::filesystem;

namespace {

constexpr int snapshot_tag = 1; // an owner's "my file of step S is durable (or not)" to rank 0

} // namespace

void Checkpointer::join_snapshot(const char* where)
{
	if (!snapshot_ || !snapshot_->writer.joinable())
		return;
	// Watched: rank 0's writer waits for every owner's word, and an owner that never reaches the
	// update would hold it; the stall watchdog names the wait and ends the job after --stall-abort.
	Snapshot& s = *snapshot_;
	wait_until([&] { return s.done.load(); }, {where, MPI_COMM_NULL});
	s.writer.join();
	if (!s.problem.empty())
		snapshot_problems_.push_back(s.problem);
}

void Checkpointer::save_owner_snapshot(const TrainingPosition& position)
{
	join_snapshot("checkpoint: the previous snapshot's files");
	snapshot_ = std::make_unique<Snapshot>();
	const std::string step_dir = checkpoint_step_dir(config_.dir, position.step);
	const std::string path = (fs::path(step_dir) / rank_file_name(topology_.rank())).string();
	nlohmann::json pieces;
	std::vector<NamedTensor> copies = host_copies(&pieces);
	const nlohmann::json metadata = {
		{"kind", "variables"}, {"rank", topology_.rank()}, {"step", position.step}, {"pieces", pieces}};
	++snapshots_;
	Snapshot* raw = snapshot_.get();
	raw->writer = std::thread([this, raw, position, step_dir, path, copies = std::move(copies), metadata] {
		finish_snapshot(*raw, position, step_dir, path, copies, metadata);
	});
}

void Checkpointer::finish_snapshot(Snapshot& snapshot, const TrainingPosition& position, const std::string& step_dir,
				   const std::string& path, const std::vector<NamedTensor>& copies,
				   const nlohmann::json& metadata)
{
	struct MarkDone {
		std::atomic<bool>& flag;
		~MarkDone() { flag = true; }
	} mark_done{snapshot.done};
	snapshot.problem = problem_of([&] {
		fs::create_directories(step_dir);
		write_file_durably(path, serialize_checkpoint(metadata, copies));
	});
	// Every path sends its word, so rank 0 never waits for a file that failed.
	int64_t word[2] = {position.step, snapshot.problem.empty() ? 1 : 0};
	if (topology_.rank() != 0) {
		TOWER_MPI(MPI_Send(word, 2, MPI_INT64_T, 0, snapshot_tag, comm_.get()));
		return;
	}
	std::vector<int> failed;
	for (const int r : savers_) {
		if (r == 0)
			continue;
		// Each owner snapshots the same updates in the same order, and MPI keeps one sender's
		// messages in order: this is its word on this step.
		MPI_Request request = MPI_REQUEST_NULL;
		TOWER_MPI(MPI_Irecv(word, 2, MPI_INT64_T, r, snapshot_tag, comm_.get(), &request));
		for (int done = 0; !done;) {
			TOWER_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
			if (!done && snapshot.abandon.load()) { // a run unwinding after an error
				MPI_Cancel(&request);
				MPI_Request_free(&request);
				return;
			}
			if (!done)
				std::this_thread::sleep_for(std::chrono::milliseconds(1));
		}
		if (word[0] != position.step || word[1] != 1)
			failed.push_back(r);
	}
	if (!failed.empty())
		snapshot.problem = fmt::format("the owners on rank(s) {} could not write their files of step {}",
					       fmt::join(failed, ", "), position.step);
	if (snapshot.problem.empty())
		snapshot.problem = problem_of([&] { write_manifest(position, step_dir, false); });
	if (snapshot.problem.empty())
		say_(fmt::format("checkpoint of update {} complete", position.step));
	else
		fmt::print(stderr, "[rank 0] error: checkpoint of update {}: {}\n", position.step, snapshot.problem);
}

int64_t Checkpointer::finish_snapshots()
{
	join_snapshot("checkpoint: every owner's file of the last snapshot");
	snapshot_.reset();
	agree(topology_.world(), snapshot_problems_.empty() ? std::string() : snapshot_problems_.front());
	return snapshots_;
}

void Checkpointer::forget_after(int64_t step)
{
	std::string problem;
	if (topology_.rank() == 0 && saving())
		problem = problem_of([&] {
			for (const auto& [s, path] : step_dirs(config_.dir))
				if (s > step) {
					fs::remove(path / manifest_name);
					fs::remove_all(path);
				}
		});
	agree(topology_.world(), problem);
}

} // namespace tower
