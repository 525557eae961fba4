// Run safety in the library: the run agreement, collective fingerprints and the watched wait.
#include <doctest/doctest.h>
#include <fmt/ranges.h>

#include <map>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <string>
#include <thread>

#include "collectives/transports/communicator.h"
#include "models/model_factory.h"
#include "base/watchdog/collective_debug.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"
#include "runtime/options/run_fields.h"
#include "runtime/safety/run_fingerprint.h"
#include "runtime/strategies/strategy.h"
#include "runtime/training/trainer.h"
#include "runtime/tower.h"
#include "test/harness/mpi_main.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::world;

namespace {

int last_rank()
{
	return world().size() - 1;
}

// "rank 0", "ranks 0, 1", ...: every rank but the last, as the agreement names them.
std::string all_but_last()
{
	std::vector<int> ranks;
	for (int r = 0; r < last_rank(); ++r)
		ranks.push_back(r);
	return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

// The error every rank raised, or "" when none.
template <typename Fn> std::string agreed_error(Fn&& fn)
{
	try {
		fn();
	} catch (const AgreedError& e) {
		return e.what();
	}
	return "";
}

bool contains(const std::string& text, const std::string& part)
{
	return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("agree_on_fields names each differing field with its value per rank, equal ranks together")
{
	const bool odd = world().rank() == last_rank() && world().size() > 1;
	const std::vector<AgreedField> fields = {{"`lr`", odd ? "0.01" : "0.05"}, {"`batch`", "32"}};
	const std::string message = agreed_error([&] { agree_on_fields(world().comm(), fields, "options differ"); });
	if (world().size() == 1) {
		CHECK(message.empty());
		return;
	}
	CHECK(message == "options differ: `lr` is 0.05 on " + all_but_last() + " and 0.01 on rank " +
				 std::to_string(last_rank()));
}

TEST_CASE("a field only some ranks send is reported as absent on the others")
{
	std::vector<AgreedField> fields = {{"`batch`", "32"}};
	if (world().rank() == 0)
		fields.push_back({"`replicas_to_aggregate`", "2"});
	const std::string message = agreed_error([&] { agree_on_fields(world().comm(), fields, "options differ"); });
	if (world().size() > 1)
		CHECK(contains(message, "`replicas_to_aggregate` is 2 on rank 0 and (absent) on rank"));
}

TEST_CASE("a distributed optimizer in a program of one's own refuses ranks with different optimizer options")
{
	const Topology topology(world().comm(), std::nullopt);
	const Device cpu;
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	OptimizerConfig optimizer;
	optimizer.momentum = world().rank() == last_rank() ? 0.5f : 0.9f;
	const std::string message =
		agreed_error([&] { std::make_unique<Tower>(topology, cpu, *model, optimizer, StrategyOptions{}); });
	if (world().size() == 1) {
		CHECK(message.empty());
		return;
	}
	CHECK(contains(message, "started with different options"));
	CHECK(contains(message, "`momentum` is 0.9 on rank"));
	CHECK(contains(message, fmt::format("0.5 on rank {}", last_rank())));
}

TEST_CASE("the trainer refuses ranks with different batches, learning rates or data, naming each")
{
	const Topology topology(world().comm(), std::nullopt);
	const Device cpu;
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	const bool odd = world().rank() == last_rank();
	const Dataset train = tower::test::synthetic_dataset(odd ? 300 : 200);
	const Dataset test;
	TrainerConfig config;
	config.batch = odd ? 16 : 8;
	config.schedule.base_lr = odd ? 0.01f : 0.05f;
	config.max_steps = 2;
	config.eval_every = 0;
	const std::string message = agreed_error([&] { Trainer trainer(topology, cpu, *model, train, test, config); });
	if (world().size() == 1) {
		CHECK(message.empty());
		return;
	}
	CHECK(contains(message, fmt::format("`batch` is 8 on {} and 16 on rank {}", all_but_last(), last_rank())));
	CHECK(contains(message, fmt::format("0.01 on rank {}", last_rank())));
	CHECK(contains(message, "training data is 200 samples"));
}

TEST_CASE("the fields that may differ are not compared, and those compared by whether they are given are")
{
	RunFingerprint f;
	describe(f, TrainerConfig{});
	std::map<std::string, std::string> compared;
	for (const auto& [name, value] : f.fields())
		compared[name] = value;
	for (const Field<TrainerConfig>& row : trainer_fields()) {
		const std::string name = fmt::format("`{}`", row.id);
		CHECK_MESSAGE(compared.count(name) == (row.must_agree ? 1u : 0u), row.id);
		if (row.must_agree && row.agreed)
			CHECK_MESSAGE(compared[name] == "no", row.id, " is compared by value, not by whether it is given");
	}
}

TEST_CASE("`debug_collectives`: a rank calling another collective is an error on every rank naming both")
{
	if (world().size() == 1)
		return;
	const auto comm = make_communicator(world().comm(), Device{});
	std::vector<float> data(16, 1.0f), gathered(16 * static_cast<size_t>(world().size()));
	set_collective_debug(true);
	// Only the operation differs: the same bytes, dtype and group, no root.
	const std::string message = agreed_error([&] {
		if (world().rank() == last_rank())
			comm->all_gather(data.data(), gathered.data(), data.size(), DType::f32);
		else
			comm->all_reduce(data.data(), data.data(), data.size(), DType::f32, ReduceOp::sum);
	});
	// A different root is a mismatch too.
	const std::string roots = agreed_error(
		[&] { comm->broadcast(data.data(), data.size(), DType::f32, world().rank() == last_rank() ? 1 : 0); });
	set_collective_debug(false);
	CHECK(contains(message, "collective mismatch"));
	CHECK(contains(message, fmt::format("rank {} calls #1 all-gather of 64 bytes of f32, group of {}", last_rank(),
					    world().size())));
	CHECK(contains(message, "#1 all-reduce of 64 bytes of f32"));
	CHECK(contains(roots, fmt::format("rank {} calls #2 broadcast of 64 bytes of f32, root 1", last_rank())));
}

TEST_CASE("`debug_collectives` passes matching collectives and leaves their results alone")
{
	const auto comm = make_communicator(world().comm(), Device{});
	std::vector<float> data(16, 1.0f);
	set_collective_debug(true);
	CHECK_NOTHROW(comm->all_reduce(data.data(), data.data(), data.size(), DType::f32, ReduceOp::sum));
	CHECK_NOTHROW(comm->broadcast(data.data(), data.size(), DType::f32, 0));
	set_collective_debug(false);
	CHECK(data[0] == static_cast<float>(world().size()));
}

TEST_CASE("a watched wait returns when its condition holds, after the back-off too")
{
	std::atomic<bool> ready{false};
	std::thread later([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(60));
		ready = true;
	});
	const auto start = std::chrono::steady_clock::now();
	wait_until([&] { return ready.load(); }, {"test wait"});
	const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	later.join();
	CHECK(ready.load());
	CHECK(waited >= 0.05);
}

TEST_CASE("a thread of background waits sleeps through its waits instead of spinning or yielding")
{
	// A request wait yields for its first 2 s (an MPI request advances only while polled), so
	// over 0.3 s it burns an idle core's time; one of background waits (local-sgd's overlapped
	// all-reduce) polls a few hundred times and sleeps in between.
	double cpu_s = 1, waited = 0;
	MPI_Comm self = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_dup(MPI_COMM_SELF, &self));
	std::thread background([&] {
		set_background_waits(true);
		int received = 0;
		MPI_Request request = MPI_REQUEST_NULL;
		TOWER_MPI(MPI_Irecv(&received, 1, MPI_INT, 0, 7, self, &request));
		std::thread later([&] {
			std::this_thread::sleep_for(std::chrono::milliseconds(300));
			const int sent = 1;
			TOWER_MPI(MPI_Send(&sent, 1, MPI_INT, 0, 7, self));
		});
		timespec before{}, after{};
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &before);
		const auto start = std::chrono::steady_clock::now();
		wait_request(request, {"background test wait", self});
		waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &after);
		cpu_s = static_cast<double>(after.tv_sec - before.tv_sec) + 1e-9 * static_cast<double>(after.tv_nsec - before.tv_nsec);
		later.join();
	});
	background.join();
	MPI_Comm_free(&self);
	CHECK(waited >= 0.29);
	CHECK(cpu_s < 0.25 * waited);
}

TEST_CASE("a stall report names the ranks that have not arrived")
{
	const auto missing = [] { return std::vector<int>{last_rank()}; };
	const std::string report = describe_stall({"node barrier", world().comm()}, 61.0, missing);
	CHECK(contains(report, "stall: waited 61.0 s in node barrier"));
	CHECK(contains(report, fmt::format("not arrived: rank {} (", last_rank())));
	const std::string peer = describe_stall({"ring all-reduce", world().comm(), 0, "step", 2}, 5.0);
	CHECK(contains(peer, "ring all-reduce step 2"));
	CHECK(contains(peer, "for a message from rank 0"));
}

TEST_CASE("stall limits refuse negative values and a warning after the abort")
{
	CHECK_THROWS_AS(set_stall_limits({-1, 600}), AgreedError);
	CHECK_THROWS_AS(set_stall_limits({700, 600}), AgreedError);
	CHECK_NOTHROW(set_stall_limits({700, 0}));
	CHECK_NOTHROW(set_stall_limits({60, 600}));
	CHECK(stall_limits().warn_s == 60);
}
