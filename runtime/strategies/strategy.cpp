// The strategy factory: turns a name and its options into a way of training.
#include "runtime/strategies/fault_injection.h"
#include "runtime/strategies/strategy.h"

#include <fmt/ranges.h>

#include "base/error.h"
#include "runtime/strategies/detached/detached_strategy.h"
#include "runtime/strategies/local_sgd/local_sgd_strategy.h"
#include "runtime/strategies/parameter_server/parameter_server.h"
#include "runtime/strategies/replicated/replicated_strategy.h"
#include "runtime/strategies/variable_averages.h"

namespace tower {

std::vector<std::string> strategy_names()
{
	return {"replicated", "parameter-server", "async", "sync-replicas", "local-sgd"};
}

namespace {

// The test hooks name ranks of this job.
void check_injections(const StrategyOptions& options, int world_size)
{
	const FaultInjection& f = faults_of(options);
	if (f.nonfinite_step >= 0 && (f.nonfinite_rank < 0 || f.nonfinite_rank >= world_size))
		throw AgreedError(fmt::format("`inject_nonfinite` '{}:{}': rank {} is outside this job's ranks 0..{}; write "
					      "STEP[:RANK] with STEP >= 1 and RANK one of this job's ranks",
					      f.nonfinite_step + 1, f.nonfinite_rank, f.nonfinite_rank, world_size - 1));
	if (f.delay_rank >= world_size)
		throw AgreedError(fmt::format("`inject_delay` '{}:{}': rank {} is outside this job's ranks 0..{}", f.delay_rank,
					      f.delay_ms, f.delay_rank, world_size - 1));
}

} // namespace

std::unique_ptr<Strategy> make_strategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
					const OptimizerConfig& optimizer, const StrategyOptions& options)
{
	check_injections(options, topology.size());
	if (options.ema_decay)
		VariableAverages::check_decay(*options.ema_decay);
	if (options.name == "replicated") {
		if (options.ps_ranks != 0)
			throw AgreedError(fmt::format("`ps_ranks` {}: server ranks belong to the parameter-server strategy; "
						      "add `strategy` parameter-server or drop `ps_ranks`", options.ps_ranks));
		return std::make_unique<ReplicatedStrategy>(topology, device, parameters, optimizer, options);
	}
	if (options.name != "sync-replicas" && options.replicas_to_aggregate != 0)
		throw AgreedError(fmt::format("`replicas_to_aggregate` {}: belongs to `strategy` sync-replicas; drop it",
					      options.replicas_to_aggregate));
	if (options.name == "parameter-server")
		return std::make_unique<ParameterServerStrategy>(topology, device, parameters, optimizer, options);
	if (options.name == "async")
		return make_async_strategy(topology, device, parameters, optimizer, options);
	if (options.name == "sync-replicas")
		return make_sync_replicas_strategy(topology, device, parameters, optimizer, options);
	if (options.name == "local-sgd")
		return make_local_sgd_strategy(topology, device, parameters, optimizer, options);
	throw AgreedError(fmt::format("`strategy` {}: unknown; the strategies are {}", options.name,
				      fmt::join(strategy_names(), ", ")));
}

} // namespace tower
