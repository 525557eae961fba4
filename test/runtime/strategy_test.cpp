// The parameter-server strategy against the replicated one, variable averages against a float64
// recursion, and the strategies' option errors.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "data/batch_assembler.h"
#include "data/sampler.h"
#include "models/model_factory.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "runtime/strategies/fault_injection.h"
#include "runtime/strategies/strategy.h"
#include "runtime/tower.h"
#include "test/harness/mpi_main.h"
#include "test/runtime/training_fixture.h"

using namespace tower;
using tower::test::world;

namespace {

constexpr int64_t batch = 8;
constexpr float lr = 0.05f;

struct Outcome {
	std::vector<std::vector<float>> parameters; // empty on a server rank
	float first_loss = 0, last_loss = 0;
	StrategyDescription facts;
};

// Trains a small MLP for `steps` updates; every worker takes its shard of the same global batches.
Outcome train(const Topology& topology, const StrategyOptions& options, const OptimizerConfig& optimizer, int steps,
	      const std::function<void(Tower&, Model&, int)>& after_step = {})
{
	static const Dataset data = tower::test::synthetic_dataset(1200);
	const Device cpu;
	auto model = make_model({"mlp", 32, 1, 7}, cpu);
	auto strategy = std::make_unique<Tower>(topology, cpu, *model, optimizer, options);
	DistributedSampler sampler(data.count, batch, std::max(strategy->worker_index(), 0), strategy->workers(), 99);
	BatchAssembler assembler(data, batch, cpu);
	Outcome out;
	for (int s = 0; s < steps; ++s) {
		StepStats stats;
		if (strategy->is_worker()) {
			const ImageBatch& b = assembler.assemble(sampler.shard(s / sampler.steps_per_epoch(), s % sampler.steps_per_epoch()));
			stats = strategy->step(b.images, b.labels, lr);
		} else {
			stats = strategy->step(Tensor{}, Tensor{}, lr);
		}
		(s == 0 ? out.first_loss : out.last_loss) = stats.forward.loss;
		if (after_step)
			after_step(*strategy, *model, s);
	}
	strategy->check_replicas();
	if (strategy->is_worker())
		out.parameters = tower::test::parameter_values(*model);
	out.facts = strategy->optimizer().strategy().describe();
	return out;
}

StrategyOptions parameter_server(int ps_ranks)
{
	StrategyOptions o;
	o.name = "parameter-server";
	o.ps_ranks = ps_ranks;
	return o;
}

// The replicated run over the workers alone: the ranks after the first `servers`.
Outcome replicated_on_workers(int servers, const OptimizerConfig& optimizer, int steps)
{
	MPI_Comm workers = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_split(world().comm(), world().rank() >= servers ? 0 : MPI_UNDEFINED, world().rank(), &workers));
	if (workers == MPI_COMM_NULL)
		return {};
	Outcome out;
	{
		const Topology topology(workers, std::nullopt);
		out = train(topology, StrategyOptions{}, optimizer, steps);
	}
	MPI_Comm_free(&workers);
	return out;
}

// The parameter-server transports: shared memory when every rank is on one node (this host),
// MPI when the nodes are simulated one rank each, as though every rank had a host of its own.
enum class Transport { shm, mpi };

std::optional<int> ranks_per_node(Transport t)
{
	return t == Transport::mpi ? std::optional<int>(1) : std::nullopt;
}

// The strategy says which transport it chose; at one rank the one node shares memory anyway.
void check_transport(const Outcome& ps, Transport t)
{
	const bool shm = ps.facts.transport.find("shared memory") != std::string::npos;
	CHECK(shm == (t == Transport::shm || world().size() == 1));
}

void check_same_as_replicated(int servers, const OptimizerConfig& optimizer, Transport transport)
{
	CAPTURE(servers);
	CAPTURE(optimizer.name);
	CAPTURE(static_cast<int>(transport));
	const Topology topology(world().comm(), ranks_per_node(transport));
	const Outcome ps = train(topology, parameter_server(servers), optimizer, 50);
	check_transport(ps, transport);
	const Outcome replicated = replicated_on_workers(servers, optimizer, 50);
	if (world().rank() < servers) {
		CHECK(ps.parameters.empty());
		return;
	}
	REQUIRE(ps.parameters.size() == replicated.parameters.size());
	CHECK(tower::test::max_relative_difference(ps.parameters, replicated.parameters) <= 1e-6);
	// Training happened: a shared no-op would also match.
	CHECK(ps.last_loss < ps.first_loss);
}

int64_t sum_over_world(int64_t v)
{
	TOWER_MPI(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_SUM, world().comm()));
	return v;
}

} // namespace

TEST_CASE("parameter-server with every rank an owner matches replicated after 50 steps")
{
	for (const Transport transport : {Transport::shm, Transport::mpi})
		for (const char* name : {"momentum", "adam"}) {
			OptimizerConfig optimizer;
			optimizer.name = name;
			check_same_as_replicated(0, optimizer, transport);
		}
}

TEST_CASE("parameter-server with dedicated server ranks matches replicated on the workers")
{
	for (const Transport transport : {Transport::shm, Transport::mpi})
		for (int servers = 1; servers < world().size(); ++servers)
			check_same_as_replicated(servers, OptimizerConfig{}, transport);
}

TEST_CASE("the owners' optimizer state adds up to one replica's, and each owner holds only its share")
{
	OptimizerConfig adam;
	adam.name = "adam";
	const Topology topology(world().comm(), std::nullopt);
	const Outcome ps = train(topology, parameter_server(0), adam, 1);
	const Outcome replicated = train(topology, StrategyOptions{}, adam, 1);
	CHECK(sum_over_world(static_cast<int64_t>(ps.facts.optimizer_state_bytes)) ==
	      static_cast<int64_t>(replicated.facts.optimizer_state_bytes));
	CHECK(sum_over_world(static_cast<int64_t>(ps.facts.parameter_bytes)) ==
	      static_cast<int64_t>(replicated.facts.parameter_bytes));
	// Adam keeps two f32 values per parameter element.
	CHECK(ps.facts.optimizer_state_bytes == 2 * ps.facts.parameter_bytes);
	if (world().size() > 1)
		CHECK(ps.facts.optimizer_state_bytes < replicated.facts.optimizer_state_bytes);
}

TEST_CASE("a non-finite gradient skips the parameter-server step on every rank")
{
	if (world().size() < 2)
		return;
	// Injected on the last rank, a worker; with 3 or more ranks also on rank 0, a dedicated server.
	for (const Transport transport : {Transport::shm, Transport::mpi})
		for (const int injected : {world().size() - 1, 0}) {
			CAPTURE(static_cast<int>(transport));
			CAPTURE(injected);
			StrategyOptions o = parameter_server(world().size() > 2 ? 1 : 0);
			if (injected == 0 && o.ps_ranks == 0)
				continue;
			edit_faults(o, [&](FaultInjection& f) { f.nonfinite_step = 2, f.nonfinite_rank = injected; });
			std::vector<std::vector<float>> before;
			const Topology topology(world().comm(), ranks_per_node(transport));
			bool skipped_at_2 = false, changed_at_3 = false;
			const Outcome out = train(topology, o, OptimizerConfig{}, 4, [&](Tower& s, Model& m, int step) {
				if (!s.is_worker())
					return;
				if (step == 1 || step == 2) {
					const auto now = tower::test::parameter_values(m);
					if (step == 2)
						skipped_at_2 = now == before;
					before = now;
				}
				if (step == 3)
					changed_at_3 = tower::test::parameter_values(m) != before;
			});
			check_transport(out, transport);
			if (world().rank() >= o.ps_ranks) {
				CHECK(skipped_at_2);
				// The step after the skip trains again: the poison did not stay behind.
				CHECK(changed_at_3);
			}
		}
}

TEST_CASE("variable averages follow the float64 recursion, in both strategies")
{
	const double decay = 0.9;
	// Replicated twice: with a copy of the variables per rank (ring), and with one per node
	// (hierarchical, sharded update), where one rank swaps the averages in for the node.
	for (const auto& [name, transport, mode] :
	     {std::tuple{"replicated", Transport::shm, AllReduceMode::ring},
	      std::tuple{"replicated", Transport::shm, AllReduceMode::hierarchical},
	      std::tuple{"parameter-server", Transport::shm, AllReduceMode::ring},
	      std::tuple{"parameter-server", Transport::mpi, AllReduceMode::ring}}) {
		CAPTURE(name);
		CAPTURE(static_cast<int>(transport));
		CAPTURE(all_reduce_mode_name(mode));
		StrategyOptions o;
		o.name = name;
		o.replicated.mode = mode;
		o.ema_decay = decay;
		std::vector<std::vector<double>> expected;
		std::vector<std::vector<float>> averaged, trained;
		const Topology topology(world().comm(), ranks_per_node(transport));
		const Outcome out = train(topology, o, OptimizerConfig{}, 20, [&](Tower& s, Model& m, int step) {
			const auto values = tower::test::parameter_values(m);
			if (step == 0) {
				// The averages start from the variables before the first update, which the
				// first step's recursion then folds in; recover them from the first update's
				// shadow: shadow = D * v0 + (1 - D) * v1.
				s.use_averages(true);
				const auto first = tower::test::parameter_values(m);
				s.use_averages(false);
				for (size_t t = 0; t < values.size(); ++t) {
					expected.emplace_back(values[t].size());
					for (size_t i = 0; i < values[t].size(); ++i)
						expected[t][i] = first[t][i];
				}
				return;
			}
			for (size_t t = 0; t < values.size(); ++t)
				for (size_t i = 0; i < values[t].size(); ++i)
					expected[t][i] = decay * expected[t][i] + (1 - decay) * values[t][i];
			if (step == 19) {
				trained = values;
				s.use_averages(true);
				averaged = tower::test::parameter_values(m);
				s.use_averages(false);
				// Swapping back restores the trained weights exactly.
				CHECK(tower::test::parameter_values(m) == trained);
			}
		});
		(void)out;
		REQUIRE(averaged.size() == expected.size());
		double worst = 0;
		for (size_t t = 0; t < expected.size(); ++t)
			for (size_t i = 0; i < expected[t].size(); ++i)
				worst = std::max(worst, std::abs(averaged[t][i] - expected[t][i]) / (std::abs(expected[t][i]) + 1e-3));
		CHECK(worst < 1e-5);
		CHECK(averaged != trained);
	}
}

TEST_CASE("strategy options that cannot apply are errors on every rank")
{
	const Topology topology(world().comm(), std::nullopt);
	const Device cpu;
	auto model = make_model({"mlp", 16, 1, 7}, cpu);
	auto make = [&](const StrategyOptions& o) { return std::make_unique<Tower>(topology, cpu, *model, OptimizerConfig{}, o); };
	StrategyOptions o = parameter_server(world().size());
	CHECK_THROWS_WITH_AS(make(o), doctest::Contains("`ps_ranks`"), AgreedError);
	o = parameter_server(-1);
	CHECK_THROWS_WITH_AS(make(o), doctest::Contains("`ps_ranks` -1"), AgreedError);
	o = parameter_server(0);
	o.replicated.groups = {{0}};
	CHECK_THROWS_WITH_AS(make(o), doctest::Contains("`groups`"), AgreedError);
	StrategyOptions replicated;
	replicated.ps_ranks = 1;
	CHECK_THROWS_WITH_AS(make(replicated), doctest::Contains("`strategy` parameter-server"), AgreedError);
	for (double bad : {-0.1, 1.0, 1.5}) {
		StrategyOptions e;
		e.ema_decay = bad;
		CHECK_THROWS_WITH_AS(make(e), doctest::Contains("`ema_decay`"), AgreedError);
	}
	StrategyOptions unknown;
	unknown.name = "gossip";
	CHECK_THROWS_WITH_AS(make(unknown), doctest::Contains("replicated, parameter-server"), AgreedError);
}
