// The sync-replicas strategy's update rule and factory: each update averages the first N
// gradients computed on the current variables; later ones are dropped as stale, so up to
// workers - N slow workers are never waited for.
#include "runtime/strategies/sync_replicas/sync_replicas_rule.h"

#include <algorithm>

#include "base/error.h"
#include "runtime/strategies/detached/detached_strategy.h"

namespace tower {

SyncReplicasRule::SyncReplicasRule(int workers, int replicas_to_aggregate)
	: n_(replicas_to_aggregate), tokens_per_step_(std::max(workers, replicas_to_aggregate)),
	  per_worker_((replicas_to_aggregate + workers - 1) / workers)
{
}

TokenAnswer SyncReplicasRule::token(const TokenBook& book) const
{
	if (book.step >= book.target)
		return TokenAnswer::stop;
	if (book.given_this_step < tokens_per_step_ && book.taken_by_worker < per_worker_)
		return TokenAnswer::grant;
	return TokenAnswer::wait;
}

std::unique_ptr<Strategy> make_sync_replicas_strategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
						      const OptimizerConfig& optimizer, const StrategyOptions& options)
{
	if (options.replicas_to_aggregate < 0)
		throw AgreedError(fmt::format("`replicas_to_aggregate` {}: an update needs at least 1 gradient",
					      options.replicas_to_aggregate));
	const int workers = std::max(topology.size() - std::max(options.ps_ranks, 0), 1);
	const int n = options.replicas_to_aggregate == 0 ? workers : options.replicas_to_aggregate;
	return std::make_unique<DetachedStrategy>(topology, device, parameters, optimizer, options,
						  std::make_unique<SyncReplicasRule>(workers, n), "sync-replicas");
}

} // namespace tower
