// Checkpoints of a training run: one directory per step, a file per saving rank, a manifest last.
#include "runtime/checkpoint/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <unistd.h>

#include <fmt/ranges.h>

#include "base/mpi/agree.h"
#include "base/error.h"
#include "base/mpi/gather.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"
#include "runtime/checkpoint/checkpoint_file.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/durable_file.h"
#include "runtime/checkpoint/owner_snapshot.h"
#include "runtime/checkpoint/variable_pieces.h"
#include "base/mpi/scalars.h"

namespace tower {

namespace fs = std::filesystem;

namespace {

constexpr const char* position_keys[] = {"step", "epoch", "update_in_epoch", "samples_per_update", "skipped"};

// The totals sit beside the position's own keys, as the trainer's counters always did, so that
// checkpoints written before totals had a name of their own still resume.
nlohmann::json position_json(const TrainingPosition& p)
{
	nlohmann::json j = {{"step", p.step},
			    {"epoch", p.epoch},
			    {"update_in_epoch", p.update_in_epoch},
			    {"samples_per_update", p.samples_per_update},
			    {"skipped", p.skipped}};
	for (const auto& [key, value] : p.totals) {
		if (std::find(std::begin(position_keys), std::end(position_keys), key) != std::end(position_keys))
			throw Error(fmt::format("a checkpoint total may not be named '{}', a key of the position itself", key));
		j[key] = value;
	}
	return j;
}

TrainingPosition position_from(const nlohmann::json& j)
{
	TrainingPosition p;
	p.step = j.at("step").get<int64_t>();
	p.epoch = j.at("epoch").get<int64_t>();
	p.update_in_epoch = j.at("update_in_epoch").get<int64_t>();
	p.samples_per_update = j.at("samples_per_update").get<int64_t>();
	p.skipped = j.at("skipped").get<int64_t>();
	for (const auto& [key, value] : j.items())
		if (value.is_number() &&
		    std::find(std::begin(position_keys), std::end(position_keys), key) == std::end(position_keys))
			p.totals[key] = value.get<double>();
	return p;
}

} // namespace

std::vector<std::string> identity_differences(const nlohmann::json& saved, const nlohmann::json& now)
{
	std::vector<std::string> out;
	// Strings as they are (the option tables' text), the rest as JSON; the key is a field id.
	auto value = [](const nlohmann::json& j, const std::string& key) {
		return !j.contains(key) ? std::string("(absent)")
		     : j.at(key).is_string() ? j.at(key).get<std::string>() : j.at(key).dump();
	};
	std::map<std::string, bool> keys;
	for (const auto& [k, v] : saved.items())
		keys[k] = true;
	for (const auto& [k, v] : now.items())
		keys[k] = true;
	for (const auto& [k, present] : keys)
		if (!saved.contains(k) || !now.contains(k) || saved.at(k) != now.at(k))
			out.push_back(fmt::format("`{}`: {} in the checkpoint, {} now", k, value(saved, k), value(now, k)));
	return out;
}

std::string checkpoint_step_dir(const std::string& dir, int64_t step)
{
	return (fs::path(dir) / fmt::format("step-{:010d}", step)).string();
}

nlohmann::json verify_checkpoint(const std::string& step_dir)
{
	const std::string manifest_path = (fs::path(step_dir) / manifest_name).string();
	if (!fs::exists(manifest_path))
		throw CheckpointError(fmt::format("{}: no manifest: the checkpoint was not finished", step_dir));
	nlohmann::json manifest = read_checkpoint_file(manifest_path).metadata();
	if (manifest.value("kind", "") != "manifest")
		throw CheckpointError(fmt::format("{}: not a manifest", manifest_path));
	nlohmann::json index = nlohmann::json::array();
	for (const auto& f : manifest.at("files")) {
		const std::string name = f.at("file").get<std::string>();
		const std::string path = (fs::path(step_dir) / name).string();
		const CheckpointFile file = read_checkpoint_file(path);
		if (file.header().file_bytes != f.at("bytes").get<uint64_t>() ||
		    file.metadata().value("step", int64_t{-1}) != manifest.at("step").get<int64_t>())
			throw CheckpointError(fmt::format("{}: not the file the manifest lists (size or step differ)", path));
		try {
			for (const auto& j : file.metadata().at("pieces")) {
				VariablePiece piece = VariablePiece::from_json(j);
				const CheckpointEntry* entry = file.find(piece.entry);
				if (entry == nullptr || entry->dtype != piece.dtype ||
				    shape_numel(entry->shape) != piece.count)
					throw CheckpointError(fmt::format("its index lists '{}', which it does not hold as listed",
									  piece.entry));
				piece.file = name;
				index.push_back(piece.to_json());
			}
		} catch (const nlohmann::json::exception& e) {
			throw CheckpointError(fmt::format("{}: its index of pieces is malformed: {}", path, e.what()));
		} catch (const CheckpointError& e) {
			throw CheckpointError(fmt::format("{}: {}", path, e.what()));
		} catch (const Error& e) {
			throw CheckpointError(fmt::format("{}: its index of pieces is wrong: {}", path, e.what()));
		}
	}
	manifest["index"] = index;
	return manifest;
}

Checkpointer::Checkpointer(const Topology& topology, const CheckpointConfig& config,
			   std::vector<Checkpointed*> optimizers, std::string strategy_name,
			   std::function<void(const std::string&)> say)
	: topology_(topology), config_(config), optimizers_(std::move(optimizers)), strategy_name_(std::move(strategy_name)),
	  say_(std::move(say)), comm_(duplicate_comm(topology.world()))
{
	if (config_.keep < 1)
		throw AgreedError(fmt::format("`keep_checkpoints` {}: keep at least 1", config_.keep));
	std::set<std::string> names;
	for (const Checkpointed* o : optimizers_)
		if (optimizers_.size() > 1 && (o->name().empty() || !names.insert(o->name()).second))
			throw AgreedError(fmt::format("checkpoints of {} optimizers need a distinct name for each ('{}' is "
						      "empty or repeated): their variables are saved under it",
						      optimizers_.size(), o->name()));
	if (config_.every < 0)
		throw AgreedError(fmt::format("`checkpoint_every` {}: give a number of steps, or 0 for the end only",
					      config_.every));
	if (config_.resume && config_.dir.empty() && config_.resume_path.empty())
		throw AgreedError("`resume` needs `checkpoint_dir` DIR (or `resume` PATH): where are the checkpoints?");
	check_directory_shared();
	// Who saves, for rank 0's manifest of the detached strategies' snapshots.
	const int saves = saves_variables() ? 1 : 0;
	std::vector<int> flags(static_cast<size_t>(topology_.size()));
	MPI_Request gather = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallgather(&saves, 1, MPI_INT, flags.data(), 1, MPI_INT, topology_.world(), &gather));
	wait_request(gather, {"checkpoint: which ranks save", topology_.world()});
	for (int r = 0; r < topology_.size(); ++r)
		if (flags[static_cast<size_t>(r)])
			savers_.push_back(r);
}

void Checkpointer::check_directory_shared() const
{
	// Where ranks other than 0 write files into rank 0's step directories (the owner
	// strategies' owners, every local-sgd rank), every one of them must see the directory rank
	// 0 writes. Said at start, not at the first checkpoint: a host-local directory on each host
	// looks fine until then.
	if (!saving())
		return;
	const int64_t others_save = all_reduce_scalar(topology_.world(),
						      static_cast<int64_t>(topology_.rank() != 0 && saves_variables()),
						      MPI_MAX, "checkpoint: which ranks save");
	if (others_save == 0)
		return;
	std::string probe, problem;
	if (topology_.rank() == 0)
		problem = problem_of([&] {
			fs::create_directories(config_.dir);
			probe = (fs::path(config_.dir) / fmt::format(".shared-probe-{}", ::getpid())).string();
			const std::string text = "tower checks that every saving rank sees this directory\n";
			write_file_durably(probe, std::as_bytes(std::span(text.data(), text.size())));
		});
	agree(topology_.world(), problem);
	broadcast_string(topology_.world(), probe, 0, "checkpoint: the shared-directory probe");
	problem.clear();
	if (saves_variables() && !fs::exists(probe))
		problem = fmt::format("`checkpoint_dir` {}: rank 0's file {} is not visible here, so this directory is not "
				      "shared with rank 0's host; the {} strategy writes a file per saving rank into one "
				      "step directory: give a directory every host shares (a network file system)",
				      config_.dir, probe, strategy_name_);
	const std::string verdict_problem = problem;
	// Everyone has looked before the probe goes.
	MPI_Request barrier = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Ibarrier(topology_.world(), &barrier));
	wait_request(barrier, {"checkpoint: the shared-directory probe", topology_.world()});
	if (topology_.rank() == 0)
		fs::remove(probe);
	agree(topology_.world(), verdict_problem);
}

struct Checkpointer::Pending {
	TrainingPosition position;
	std::string step_dir;
	std::chrono::steady_clock::time_point start;
	std::thread writer;               // this rank's file, on a saving rank
	std::atomic<bool> written{false}; // the writer is done (problem is set)
	std::string problem;
	int failed = 0;                   // this rank's vote, then the largest over the ranks
	MPI_Request vote = MPI_REQUEST_NULL;
	bool voting = false, voted = false;
	std::thread manifest;             // rank 0, once every rank's file is durable
	std::atomic<bool> manifest_done{false};
	std::string manifest_problem;
	bool announced = false;
};

Checkpointer::~Checkpointer()
{
	if (snapshot_ && snapshot_->writer.joinable()) {
		snapshot_->abandon = true; // finish_snapshots() joined it on a run that ended well
		snapshot_->writer.join();
	}
	if (!pending_)
		return;
	if (pending_->writer.joinable())
		pending_->writer.join();
	if (pending_->manifest.joinable())
		pending_->manifest.join();
}

double Checkpointer::save(const TrainingPosition& position)
{
	// The pause counts the wait for a previous checkpoint still being written.
	const auto start = std::chrono::steady_clock::now();
	wait();
	const int rank = topology_.rank();
	auto p = std::make_unique<Pending>();
	p->position = position;
	p->step_dir = checkpoint_step_dir(config_.dir, position.step);
	p->start = start;
	std::string problem;
	if (rank == 0)
		problem = problem_of([&] {
			fs::create_directories(config_.dir);
			// An older checkpoint of this step loses its manifest first, so it is never half valid.
			fs::remove(fs::path(p->step_dir) / manifest_name);
			fs::remove_all(p->step_dir);
			fs::create_directory(p->step_dir);
		});
	agree(topology_.world(), problem);

	if (saves_variables()) {
		// A host copy is all training waits for; the checksums and the file are made beside the
		// next steps.
		nlohmann::json pieces;
		std::vector<NamedTensor> copies = host_copies(&pieces);
		const nlohmann::json metadata = {
			{"kind", "variables"}, {"rank", rank}, {"step", position.step}, {"pieces", pieces}};
		const std::string path = (fs::path(p->step_dir) / rank_file_name(rank)).string();
		Pending* raw = p.get();
		p->writer = std::thread([raw, copies = std::move(copies), metadata, path] {
			raw->problem = problem_of([&] { write_file_durably(path, serialize_checkpoint(metadata, copies)); });
			raw->written = true;
		});
	} else {
		p->written = true;
	}
	pending_ = std::move(p);
	const double pause = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	poll();
	return pause;
}

std::vector<NamedTensor> Checkpointer::host_copies(nlohmann::json* pieces) const
{
	std::vector<NamedTensor> copies;
	*pieces = nlohmann::json::array();
	for (const auto& v : variables()) {
		copies.push_back({v.name, Tensor::empty(v.tensor.shape(), v.tensor.dtype(), Device{})});
		copies.back().tensor.copy_from(v.tensor);
		pieces->push_back(piece_of(v, whole_shape()).to_json());
	}
	return copies;
}

void Checkpointer::start_agreement()
{
	Pending& p = *pending_;
	// Watched (a writer stuck on a hung file system is named after --stall-warn), then joined.
	wait_until([&] { return p.written.load(); }, {"checkpoint: writing this rank's file", MPI_COMM_NULL});
	if (p.writer.joinable())
		p.writer.join();
	if (!p.problem.empty())
		fmt::print(stderr, "[rank {}] error: checkpoint of step {}: {}\n", topology_.rank(), p.position.step, p.problem);
	p.failed = p.problem.empty() ? 0 : 1;
	TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, &p.failed, 1, MPI_INT, MPI_MAX, comm_.get(), &p.vote));
	p.voting = true;
}

void Checkpointer::poll()
{
	if (!pending_)
		return;
	Pending& p = *pending_;
	if (!p.voting && p.written)
		start_agreement();
	if (p.voting && !p.voted) {
		int done = 0;
		TOWER_MPI(MPI_Test(&p.vote, &done, MPI_STATUS_IGNORE));
		if (done) {
			p.voted = true;
			if (topology_.rank() == 0 && p.failed == 0)
				p.manifest = std::thread([this, &p] {
					p.manifest_problem = problem_of([&] { write_manifest(p); });
					p.manifest_done = true;
				});
		}
	}
	if (p.manifest_done && !p.announced) {
		p.announced = true;
		if (p.manifest_problem.empty())
			say_(fmt::format("checkpoint of step {} complete ({:.0f} ms after it began)", p.position.step,
					 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count()));
	}
}

void Checkpointer::wait()
{
	if (!pending_)
		return;
	Pending& p = *pending_;
	if (!p.voting)
		start_agreement();
	if (!p.voted) {
		wait_request(p.vote, {"checkpoint: every rank's file written", comm_.get()});
		p.voted = true;
		if (topology_.rank() == 0 && p.failed == 0) {
			p.manifest_problem = problem_of([&] { write_manifest(p); });
			p.manifest_done = true;
		}
	}
	if (p.manifest.joinable()) { // rank 0, writing the manifest in the background
		wait_until([&] { return p.manifest_done.load(); }, {"checkpoint: rank 0 writing the manifest", MPI_COMM_NULL});
		p.manifest.join();
	}
	poll(); // announces completion
	const int failed = p.failed;
	const int64_t step = p.position.step;
	const std::string problem = p.manifest_problem;
	pending_.reset();
	if (failed)
		throw AgreedError(fmt::format("checkpoint of step {}: a rank could not write its file (its error is printed "
					      "above); the previous checkpoint stays the latest valid one",
					      step));
	agree(topology_.world(), problem);
}

void Checkpointer::write_manifest(const Pending& p) const
{
	write_manifest(p.position, p.step_dir, true);
}

void Checkpointer::write_manifest(const TrainingPosition& position, const std::string& step_dir,
				  bool later_are_superseded) const
{
	// Every saving rank's file is durable (its word said so): list them, then the manifest makes
	// the checkpoint valid.
	nlohmann::json files = nlohmann::json::array();
	for (const int r : savers_) {
		const fs::path f = fs::path(step_dir) / rank_file_name(r);
		if (!fs::exists(f))
			throw Error(fmt::format("{} is missing though rank {} reported it written", f.string(), r));
		files.push_back({{"rank", r}, {"file", f.filename().string()}, {"bytes", fs::file_size(f)}});
	}
	const nlohmann::json manifest = {{"kind", "manifest"},
					 {"step", position.step},
					 {"world_size", topology_.size()},
					 {"strategy", strategy_name_},
					 {"identity", config_.identity},
					 {"position", position_json(position)},
					 {"files", files}};
	write_file_durably((fs::path(step_dir) / manifest_name).string(), serialize_checkpoint(manifest, {}));
	sync_directory(config_.dir);
	// The detached strategies' owners may be writing later steps already; forget_after() took
	// care of a superseded run's before they started.
	prune(position.step, later_are_superseded);
}

void Checkpointer::prune(int64_t just_written, bool later_are_superseded) const
{
	int complete = 0;
	for (const auto& [step, path] : step_dirs(config_.dir)) {
		const bool finished = fs::exists(path / manifest_name);
		if (step > just_written && !later_are_superseded)
			continue;
		// Later steps belong to a run this one resumed from an older checkpoint: superseded.
		if (step > just_written || (finished && ++complete > config_.keep) || (!finished && step < just_written)) {
			fs::remove(path / manifest_name);
			fs::remove_all(path);
		}
	}
}

std::vector<std::string> Checkpointer::candidates() const
{
	const std::string where = config_.resume_path.empty() ? config_.dir : config_.resume_path;
	if (fs::exists(fs::path(where) / manifest_name) || step_of(where) >= 0)
		return {where};
	std::vector<std::string> out;
	for (const auto& [step, path] : step_dirs(where))
		out.push_back(path.string());
	return out;
}

std::string Checkpointer::choose(std::string* manifest_text) const
{
	const std::string where = config_.resume_path.empty() ? config_.dir : config_.resume_path;
	const auto list = candidates();
	if (list.empty())
		throw Error(fmt::format("`resume`: no checkpoint in {}", where));
	for (size_t i = 0; i < list.size(); ++i) {
		try {
			*manifest_text = verify_checkpoint(list[i]).dump();
			return list[i];
		} catch (const CheckpointError& e) {
			say_(fmt::format("warning: checkpoint {} is not valid: {}; {}", list[i], e.what(),
					 i + 1 < list.size() ? "trying the previous one" : "no older one is left"));
		}
	}
	throw Error(fmt::format("`resume`: none of the {} checkpoint(s) in {} is valid (see the warnings above)",
				list.size(), where));
}

bool Checkpointer::saves_variables() const
{
	for (const Checkpointed* o : optimizers_)
		if (o->saves_variables())
			return true;
	return false;
}

std::vector<NamedTensor> Checkpointer::variables() const
{
	// Each optimizer's own names ("G/...", "D/...") keep them apart in the one file of a rank.
	std::vector<NamedTensor> all;
	for (Checkpointed* o : optimizers_)
		if (o->saves_variables())
			for (auto& v : o->variables())
				all.push_back(v);
	return all;
}

WholeShapeFn Checkpointer::whole_shape() const
{
	// A variable's whole shape is its parameter's: "fc2.weight", its state "fc2.weight/momentum",
	// its average "fc2.weight/ema", each under "<optimizer>/" for a named optimizer. Counters
	// (steps, the loss scale) are no parameter's and are always saved whole.
	return [this](const std::string& variable) {
		Shape best;
		size_t best_length = 0;
		for (const Checkpointed* o : optimizers_) {
			const std::string prefix = o->name().empty() ? std::string() : o->name() + "/";
			if (variable.rfind(prefix, 0) != 0)
				continue;
			const std::string rest = variable.substr(prefix.size());
			for (const Parameter* p : o->parameters())
				if ((rest == p->name || rest.rfind(p->name + "/", 0) == 0) && p->name.size() >= best_length) {
					best = p->value.shape();
					best_length = p->name.size();
				}
		}
		return best;
	};
}

void Checkpointer::load_variables(const std::string& step_dir, const nlohmann::json& index)
{
	// Each variable this rank holds, whole or a slice, is assembled from whichever files hold its
	// elements: the checkpoint may come from another number of owners or another strategy.
	std::vector<VariablePiece> saved;
	for (const auto& j : index)
		saved.push_back(VariablePiece::from_json(j));
	PieceFiles read(step_dir);
	std::vector<std::string> wrong;
	for (auto& v : variables()) {
		const VariablePiece target = piece_of(v, whole_shape());
		if (v.may_be_absent && std::none_of(saved.begin(), saved.end(),
						    [&](const VariablePiece& p) { return p.variable == target.variable; }))
			continue;
		try {
			fill_from_pieces(target, v.tensor, saved, std::ref(read));
		} catch (const CheckpointError&) {
			throw;
		} catch (const Error& e) {
			wrong.push_back(e.what());
		}
	}
	if (!wrong.empty())
		throw Error(fmt::format("{} does not fit this run's variables: {}", step_dir, fmt::join(wrong, "; ")));
}

std::optional<TrainingPosition> Checkpointer::restore(int64_t samples_per_update)
{
	if (!config_.resume)
		return std::nullopt;
	const MPI_Comm world = topology_.world();
	std::string step_dir, manifest_text, problem;
	if (topology_.rank() == 0)
		problem = problem_of([&] { step_dir = choose(&manifest_text); });
	agree(world, problem);
	broadcast_string(world, step_dir, 0, "checkpoint: broadcast of a listing");
	broadcast_string(world, manifest_text, 0, "checkpoint: broadcast of a listing");
	const nlohmann::json manifest = nlohmann::json::parse(manifest_text);

	const nlohmann::json saved_identity = config_.read_identity ? config_.read_identity(manifest.at("identity"), config_.identity)
								    : manifest.at("identity");
	const auto differences = identity_differences(saved_identity, config_.identity);
	if (!differences.empty())
		throw AgreedError(fmt::format("`resume` {}: the options differ from the checkpoint's ({}); run with the "
					      "checkpoint's options (only those listed in docs/checkpoints.md may change)",
					      step_dir, fmt::join(differences, "; ")));
	const std::string saved_strategy = manifest.at("strategy").get<std::string>();
	const int saved_world = manifest.at("world_size").get<int>();
	if (saved_world != topology_.size() || saved_strategy != strategy_name_)
		say_(fmt::format("resuming a checkpoint of {} ranks ({}) on {} ranks ({}): each variable is cut anew "
				 "from the saved pieces; the data order from here on is that of a run at this size",
				 saved_world, saved_strategy, topology_.size(), strategy_name_));
	problem.clear();
	if (saves_variables())
		problem = problem_of([&] { load_variables(step_dir, manifest.at("index")); });
	agree(world, problem);
	for (Checkpointed* o : optimizers_)
		o->variables_restored();

	TrainingPosition p = position_from(manifest.at("position"));
	if (p.samples_per_update != samples_per_update) {
		// Keep the samples of the epoch already seen: continue at the update that covers them.
		p.update_in_epoch = p.update_in_epoch * p.samples_per_update / samples_per_update;
		p.samples_per_update = samples_per_update;
	}
	say_(fmt::format("resumed from {} at step {} (epoch {}, update {} of it)", step_dir, p.step, p.epoch + 1,
			 p.update_in_epoch));
	return p;
}

} // namespace tower
