// Resume through the library's trainer: a run continued from its step-10 checkpoint ends on the
// parameters of the run that went on, for every strategy, with Adam, averages, a dynamic loss
// scale and accumulation in play, so every kind of state must come back.
#include <doctest/doctest.h>

#include <filesystem>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

#include "runtime/options/names.h"
#include "models/model_factory.h"
#include "base/crc32c.h"
#include "base/mpi/mpi_check.h"
#include "runtime/training/trainer.h"
#include "test/harness/mpi_main.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::world;

namespace {

// A directory every rank names alike, made empty by rank 0.
std::string shared_empty_dir(const std::string& tag)
{
	int pid = world().rank() == 0 ? static_cast<int>(::getpid()) : 0;
	TOWER_MPI(MPI_Bcast(&pid, 1, MPI_INT, 0, world().comm()));
	const auto dir = std::filesystem::temp_directory_path() / ("tower-checkpoint-" + std::to_string(pid) + "-" + tag);
	if (world().rank() == 0) {
		std::filesystem::remove_all(dir);
		std::filesystem::create_directories(dir);
	}
	TOWER_MPI(MPI_Barrier(world().comm()));
	return dir.string();
}

TrainerConfig config(const StrategyOptions& strategy, const std::string& dir)
{
	TrainerConfig c;
	c.optimizer.name = "adam";
	c.schedule.base_lr = 0.01f;
	c.strategy = strategy;
	c.strategy.ema_decay = 0.9;
	c.strategy.gradients.loss_scale = parse_loss_scale("dynamic");
	c.epochs = 1;
	c.batch = 4;
	c.accumulate = 2;
	c.max_steps = 20;
	c.log_every = 1000;
	c.eval_every = 0;
	c.check_every = 0;
	c.checkpoint.dir = dir;
	c.checkpoint.every = 10;
	return c;
}

// The parameters' hash from the summary, the averaged parameters' hash and the loss scale (seen
// through the strategy, whatever variables() lists), and a checksum of every variable this rank
// holds.
std::string trained_hash(const TrainerConfig& c, std::optional<int> ranks_per_node, DType precision)
{
	static const Dataset data = tower::test::synthetic_dataset(400);
	static const Dataset no_test_data; // the trainer keeps a reference: it must outlive the run
	const Topology topology(world().comm(), ranks_per_node);
	const Device cpu;
	auto model = make_model({"mlp", 32, 1, 7, precision}, cpu);
	Trainer trainer(topology, cpu, *model, data, no_test_data, c);
	const std::string parameters = fmt::format("{:016x}", trainer.run().replica_hash);
	Tower& strategy = trainer.tower();
	strategy.use_averages(true);
	const uint64_t averaged = strategy.check_replicas();
	strategy.use_averages(false);
	uint32_t state = 0;
	for (const auto& v : strategy.variables()) {
		state = crc32c(v.name.data(), v.name.size(), state);
		state = crc32c(v.tensor.data(), v.tensor.bytes(), state);
	}
	return fmt::format("{} {:x} {} {}", parameters, averaged, strategy.loss_scaler().log2_scale(), state);
}

// `ranks_per_node` 1 simulates a host per rank: the parameter server's MPI transport.
void check_resume(const StrategyOptions& strategy, const std::string& tag,
		  std::optional<int> ranks_per_node = std::nullopt, DType precision = DType::f32)
{
	const std::string dir = shared_empty_dir(tag);
	const std::string whole = trained_hash(config(strategy, dir), ranks_per_node, precision);
	// The run is cut after step 10's checkpoint: step 20's goes, then the run resumes.
	if (world().rank() == 0)
		std::filesystem::remove_all(checkpoint_step_dir(dir, 20));
	TOWER_MPI(MPI_Barrier(world().comm()));
	TrainerConfig resumed = config(strategy, dir);
	resumed.checkpoint.resume = true;
	CHECK(trained_hash(resumed, ranks_per_node, precision) == whole);
	if (world().rank() == 0)
		std::filesystem::remove_all(dir);
}

} // namespace

TEST_CASE("resume: replicated")
{
	StrategyOptions o;
	o.replicated.mode = AllReduceMode::hierarchical;
	check_resume(o, "replicated");
}

TEST_CASE("resume: replicated in bf16 (16-bit compute, f32 masters and state)")
{
	StrategyOptions o;
	o.replicated.mode = AllReduceMode::hierarchical;
	check_resume(o, "replicated-bf16", std::nullopt, DType::bf16);
}

TEST_CASE("resume: parameter-server, every rank an owner, and with a dedicated server")
{
	StrategyOptions o;
	o.name = "parameter-server";
	check_resume(o, "ps");
	if (world().size() > 1) {
		check_resume(o, "ps-mpi", 1);
		o.ps_ranks = 1;
		check_resume(o, "ps-server");
		check_resume(o, "ps-server-mpi", 1);
	}
}
