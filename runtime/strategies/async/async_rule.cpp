// The async strategy: its update rule (every gradient is one update, applied as it arrives) and
// its factory over the detached strategies' mechanics (detached_strategy.h).
#include "runtime/strategies/async/async_rule.h"

#include <algorithm>

#include "base/error.h"
#include "runtime/strategies/detached/detached_strategy.h"

namespace tower {

TokenAnswer AsyncRule::token(const TokenBook& book) const
{
	if (book.given_total >= book.target)
		return TokenAnswer::stop;
	// The oldest gradient in flight could still see every other one in flight and the new one
	// applied before it: its staleness would reach (step - its tag) + in_flight.
	if (staleness_.max_staleness >= 0 && book.in_flight > 0 &&
	    book.step - book.oldest_in_flight + book.in_flight > staleness_.max_staleness)
		return TokenAnswer::wait;
	return TokenAnswer::grant;
}

float AsyncRule::staleness_factor(int64_t staleness) const
{
	if (!staleness_.scale)
		return 1.0f;
	// The seed's 1/workers already covers a staleness of workers - 1; only staler gradients shrink.
	const int64_t covered = scale_ ? workers_ : 1;
	return static_cast<float>(covered) / static_cast<float>(std::max(covered, staleness + 1));
}

std::unique_ptr<Strategy> make_async_strategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
					      const OptimizerConfig& optimizer, const StrategyOptions& options)
{
	if (options.replicas_to_aggregate != 0)
		throw AgreedError(fmt::format("`replicas_to_aggregate` {}: async applies every gradient alone; use "
					      "`strategy` sync-replicas to aggregate them", options.replicas_to_aggregate));
	const int workers = topology.size() - std::max(options.ps_ranks, 0);
	return std::make_unique<DetachedStrategy>(topology, device, parameters, optimizer, options,
						  std::make_unique<AsyncRule>(std::max(workers, 1), options.async_scale,
									      AsyncStaleness{options.async_staleness_scale,
											     options.max_staleness}),
						  "async");
}

} // namespace tower
