// Async training: the owners apply every worker's gradient as soon as it arrives.
#include "runtime/async_strategy.h"

#include "runtime/base/error.h"
#include "runtime/detached_strategy.h"

namespace tower {

TokenAnswer AsyncRule::token(const TokenBook& book) const
{
	return book.given_total < book.target ? TokenAnswer::grant : TokenAnswer::stop;
}

std::unique_ptr<Strategy> make_async_strategy(const Topology& topology, const Device& device, Model& model,
					      const OptimizerConfig& optimizer, const StrategyOptions& options)
{
	if (options.replicas_to_aggregate != 0)
		throw AgreedError(fmt::format("--replicas-to-aggregate {}: async applies every gradient alone; use "
					      "--strategy sync-replicas to aggregate them", options.replicas_to_aggregate));
	const int workers = topology.size() - std::max(options.ps_ranks, 0);
	return std::make_unique<DetachedStrategy>(topology, device, model, optimizer, options,
						  std::make_unique<AsyncRule>(std::max(workers, 1), options.async_scale),
						  "async");
}

} // namespace tower
