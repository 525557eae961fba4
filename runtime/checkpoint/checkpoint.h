// Checkpoints of a training run: one directory per step, a file per saving rank, a manifest last.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mpi/topology.h"
#include "runtime/checkpoint/checkpointed.h"

namespace tower {

struct CheckpointConfig {
	std::string dir;         // where step directories are written; empty: no checkpoints
	int64_t every = 0;       // a checkpoint every this many steps (and one at the end); 0: at the end only
	int keep = 3;            // complete checkpoints kept in dir
	bool resume = false;     // start from a checkpoint: resume_path, else the latest valid one in dir
	std::string resume_path; // a step directory, or a directory of them
	// What must agree for a run to resume another: its options less those allowed to change
	// (tower train builds it from the option tables: cli/train/train_identity.cpp). Compared key by key
	// on resume, after `read_identity` (when set) turned the saved one into the same form.
	nlohmann::json identity = nlohmann::json::object();
	std::function<nlohmann::json(const nlohmann::json& saved, const nlohmann::json& now)> read_identity;
};

// Where the trainer stands: enough to continue with the next step exactly.
struct TrainingPosition {
	int64_t step = 0;            // updates done
	int64_t epoch = 0;           // 0-based epoch of the next update
	int64_t update_in_epoch = 0; // updates of that epoch done
	int64_t samples_per_update = 0;
	int64_t skipped = 0;         // skipped updates so far
	// The program's own running totals up to this step (seconds, counts), saved and given back
	// as they are, so that a resumed run's summary can cover all of it.
	std::map<std::string, double> totals;
};

// The keys whose values differ between a saved identity and the current one, as
// "key: SAVED in the checkpoint, NOW now" lines (keys missing on one side included).
std::vector<std::string> identity_differences(const nlohmann::json& saved, const nlohmann::json& now);

// "DIR/step-0000000200" for step 200.
std::string checkpoint_step_dir(const std::string& dir, int64_t step);

// Checks one checkpoint (a step directory) completely: its manifest and every file it lists,
// CRCs included. Returns the manifest's metadata; throws CheckpointError saying which file is
// wrong and how.
nlohmann::json verify_checkpoint(const std::string& step_dir);

class Checkpointer {
public:
	// Saves and restores every part of the program: its optimizers, or the state another
	// framework keeps (each part's variables carry its name); they and `topology` must outlive
	// it. `strategy_name` is recorded in the manifest; a resume under another strategy (or
	// world size) is announced, not refused. `say` prints a line on rank 0.
	Checkpointer(const Topology& topology, const CheckpointConfig& config, std::vector<Checkpointed*> parts,
		     std::string strategy_name, std::function<void(const std::string&)> say);
	// Waits for a checkpoint still being written (not collective: it completes this rank's part).
	~Checkpointer();
	Checkpointer(const Checkpointer&) = delete;
	Checkpointer& operator=(const Checkpointer&) = delete;

	bool saving() const { return !config_.dir.empty(); }
	bool due(int64_t step) const { return saving() && config_.every > 0 && step % config_.every == 0; }

	// Collective: starts the checkpoint of `position.step`. Training pauses only while the saving
	// ranks copy their variables and the step directory is made; a thread per saving rank writes
	// the file, and once every rank's file is durable rank 0 writes the manifest (poll() and
	// wait() see to that). Finishes the previous checkpoint first. Returns the seconds training
	// paused, that wait included.
	double save(const TrainingPosition& position);
	// Not collective, cheap: moves a checkpoint in progress along (call it every step).
	void poll();
	// Collective: finishes the checkpoint in progress, if any; tower::AgreedError when a rank
	// failed to write its part.
	void wait();

	// The detached strategies (async, sync-replicas), whose owners reach each update on their own:
	//
	// Not collective: called on this rank's owner thread right after it applied update
	// `position.step`, when nothing else writes its variables. Copies them (they hold exactly that
	// update) and writes them on a thread; once every owner has said its file is durable, rank 0
	// writes the manifest. Waits for this rank's previous snapshot first.
	void save_owner_snapshot(const TrainingPosition& position);
	// Collective, after the owners stopped: waits for every snapshot in progress; AgreedError when
	// an owner could not write its file. Returns the number of snapshots rank 0 began.
	int64_t finish_snapshots();
	// Collective, before training: rank 0 removes the step directories after `step`, which
	// belong to a run this one supersedes (owners write into a step's directory without asking).
	void forget_after(int64_t step);

	// Collective, when the config asks to resume: loads the latest valid checkpoint into the
	// optimizers (a corrupt one gives a warning naming the file and the previous one is tried) and
	// returns where to continue. Any world size and any strategy that checkpoints can load it:
	// each saving rank assembles its variables from the saved pieces that cover them. Throws
	// tower::AgreedError on every rank when no checkpoint is valid or when options differ.
	// nullopt when not resuming.
	std::optional<TrainingPosition> restore(int64_t samples_per_update);

private:
	struct Pending;
	struct Snapshot;

	std::vector<std::string> candidates() const;
	std::string choose(std::string* manifest_text) const;
	void load_variables(const std::string& step_dir, const nlohmann::json& index);
	std::function<Shape(const std::string&)> whole_shape() const;
	bool saves_variables() const;
	void check_directory_shared() const;
	std::vector<NamedTensor> variables() const;
	void start_agreement();
	void write_manifest(const Pending& p) const;
	void write_manifest(const TrainingPosition& position, const std::string& step_dir, bool later_are_superseded) const;
	std::vector<NamedTensor> host_copies(nlohmann::json* pieces) const;
	void join_snapshot(const char* where);
	void finish_snapshot(Snapshot& snapshot, const TrainingPosition& position, const std::string& step_dir,
			     const std::string& path, const std::vector<NamedTensor>& copies, const nlohmann::json& metadata);
	void prune(int64_t just_written, bool later_are_superseded) const;

	const Topology& topology_;
	CheckpointConfig config_;
	std::vector<Checkpointed*> optimizers_;
	std::string strategy_name_;
	std::function<void(const std::string&)> say_;
	CommHandle comm_; // private: the completion vote of a checkpoint runs on it in the background
	std::unique_ptr<Pending> pending_;
	std::vector<int> savers_;             // the world ranks whose variables() are saved
	std::unique_ptr<Snapshot> snapshot_;  // the detached strategies': this rank's latest
	std::vector<std::string> snapshot_problems_; // this rank's failed snapshots (the owner thread's, until finish_snapshots)
	int64_t snapshots_ = 0;
};

} // namespace tower
