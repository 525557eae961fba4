// The detached loop (async, sync-replicas): each worker walks its own shard for as long as the
// chief grants tokens, the owners apply and log, and evaluation and the summary follow at the end.
#include "runtime/training/run.h"

#include <algorithm>

#include "base/error.h"

namespace tower {

using Clock = SteadyClock;

nlohmann::json Trainer::Run::run_detached(DetachedRun& detached)
{
	if (c_.accumulate != 1)
		throw AgreedError(fmt::format("`accumulate` {}: `strategy` {} pushes one gradient per token; drop "
					      "`accumulate` or use a lock-step strategy", c_.accumulate, facts_.name));
	// A checkpoint's position counts the walk of all workers' batches: update_in_epoch is the
	// updates applied and samples_per_update their batches' samples, so restore() turns it into
	// how far each worker of this run walks in before its first batch.
	int64_t first_update = 0;
	resume(&first_update);
	const int64_t first_walk = epoch_ * sampler_.steps_per_epoch() + first_update;
	if (checkpointer_.saving())
		checkpointer_.forget_after(step_);
	const int64_t samples_per_update = c_.batch * detached.gradients_per_update();
	const auto start = Clock::now();
	DetachedPlan plan;
	plan.planned_steps = total_steps_;
	plan.lr = [this](int64_t planned_step) { return schedule_.lr(planned_step); };
	plan.log_every = c_.log_every;
	plan.on_window = [this](const nlohmann::json& window) { log_detached_window(window); };
	plan.on_applied = [this, samples_per_update, start](int64_t update, bool last) {
		if (observer_ != nullptr)
			observer_->stepped(update);
		if (!checkpointer_.saving() || !(last || checkpointer_.due(update)))
			return;
		TrainingPosition p;
		p.step = update;
		p.update_in_epoch = update;
		p.samples_per_update = samples_per_update;
		p.totals = {{"train_s", resumed_train_s_ + seconds_since(start)}};
		checkpointer_.save_owner_snapshot(p);
	};
	detached.start(plan);
	if (tower_->is_worker()) {
		// Each worker walks its own shard, epoch after epoch, for as long as the chief grants tokens.
		const int64_t per_epoch = sampler_.steps_per_epoch();
		for (int64_t k = first_walk;; ++k) {
			const Batch& batch = batcher_.assemble(sampler_.shard(k / per_epoch, k % per_epoch));
			StepStats s;
			if (!tower_->work(batch, &s))
				break;
			compute_s_ += s.compute_s;
			allreduce_s_ += s.allreduce_s;
		}
	}
	detached_totals_ = detached.finish();
	if (checkpointer_.saving())
		checkpoints_ = checkpointer_.finish_snapshots();
	train_s_ = resumed_train_s_ + seconds_since(start);
	// The chief's count is the run's (a resumed run that applied none keeps the checkpoint's).
	step_ = std::max(step_, detached_totals_["updates"].get<int64_t>());
	epoch_ = c_.epochs - 1;
	if (test_.size() > 0 && c_.eval_every > 0)
		evaluate(epoch_);
	return finish();
}

void Trainer::Run::log_detached_window(const nlohmann::json& window)
{
	// Runs on rank 0's owner thread while its main thread only trains: nothing else records
	// metrics or progress until finish().
	const int64_t step = window["step"].get<int64_t>();
	const int64_t planned = std::max<int64_t>(window["updates_planned"].get<int64_t>(), 1);
	ProgressState p;
	p.epoch = 1 + static_cast<int>(std::min<int64_t>(c_.epochs - 1, (step - 1) * c_.epochs / planned));
	p.epochs = c_.epochs;
	p.step = step;
	p.steps = planned;
	p.loss = window["loss"].get<float>();
	p.samples_per_s = window["samples_per_s"].get<double>();
	p.eta_s = 0;
	p.extra = fmt::format("lr {:.4g}  {:.1f} updates/s  {:.2f} gradients/update  dropped {}{}  staleness {:.2f} (max {})",
			      window["lr"].get<double>(), window["updates_per_s"].get<double>(),
			      window["gradients_per_update"].get<double>(), window["dropped_stale"].get<int64_t>(),
			      window["dropped_nonfinite"].get<int64_t>() > 0
				      ? fmt::format(" (+{} non-finite)", window["dropped_nonfinite"].get<int64_t>())
				      : std::string(),
			      window["staleness_mean"].get<double>(), window["staleness_max"].get<int64_t>());
	if (observer_ != nullptr)
		observer_->progressed(p);
	nlohmann::json line = window;
	line["event"] = "step";
	line["epoch"] = p.epoch;
	line.update(strategy_metrics());
	write(line);
}

} // namespace tower
