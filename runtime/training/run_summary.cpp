// A run's summary and final tally, and the evaluation's metrics and text they share.
#include "runtime/training/run.h"

#include <algorithm>
#include <cmath>

#include "base/mpi/scalars.h"
#include "base/tensor/memory.h"

namespace tower {

namespace {

int64_t max_over_ranks(MPI_Comm comm, int64_t value)
{
	return all_reduce_scalar(comm, value, MPI_MAX, "summary totals");
}

int64_t sum_over_ranks(MPI_Comm comm, int64_t value)
{
	return all_reduce_scalar(comm, value, MPI_SUM, "summary totals");
}

} // namespace

// For a byte-level model, bits per byte.
double bits_per_token(const EvalResult& e)
{
	return e.loss / std::log(2.0);
}

// What a model defines of its evaluation: accuracy for a classifier, perplexity for the others,
// and bits per token for language models.
void add_evaluation(nlohmann::json& line, const EvalResult& e, const std::string& suffix, bool tokens)
{
	line["test_loss" + suffix] = e.loss;
	if (e.classifies)
		line["test_accuracy" + suffix] = e.accuracy;
	else
		line["test_perplexity" + suffix] = e.perplexity();
	if (tokens && !e.classifies)
		line["test_bits_per_token" + suffix] = bits_per_token(e);
}

std::string evaluation_text(const EvalResult& e, bool tokens)
{
	if (e.classifies)
		return fmt::format("test accuracy {:.2f}%  test loss {:.4f}", 100.0 * e.accuracy, e.loss);
	return fmt::format("test loss {:.4f}  perplexity {:.3f}{}", e.loss, e.perplexity(),
			   tokens ? fmt::format("  {:.3f} bits/token", bits_per_token(e)) : std::string());
}

nlohmann::json Trainer::Run::strategy_metrics() const
{
	return {{"strategy", facts_.name},
		{"parameter_bytes", facts_.parameter_bytes},
		{"optimizer_state_bytes", facts_.optimizer_state_bytes}};
}

nlohmann::json Trainer::Run::finish()
{
	// A dedicated server holds no whole model and reports 0: rank 0 prints the workers' hash.
	const uint64_t hash = all_reduce_scalar(topology_.world(), tower_->check_replicas(), MPI_MAX, "summary: replica hash");
	// Steps before a resume took no time in this run; detached strategies count what was applied.
	const double samples_per_s = detached_totals_.is_null()
		? static_cast<double>((step_ - resumed_step_) * samples_per_step()) / std::max(train_s_ - resumed_train_s_, 1e-9)
		: static_cast<double>(detached_totals_["samples_applied"].get<int64_t>()) /
			  std::max(train_s_ - resumed_train_s_, 1e-9);
	peak_memory_ = std::max(peak_memory_, peak_memory_bytes(device_));
	nlohmann::json s = summary(hash, samples_per_s);
	if (observer_ != nullptr)
		observer_->finished(s);
	timeline_.finish();
	say(tally(hash, samples_per_s));
	return s;
}

nlohmann::json Trainer::Run::summary(uint64_t hash, double samples_per_s)
{
	const auto state_bytes = static_cast<int64_t>(facts_.optimizer_state_bytes);
	const bool evaluated = last_eval_.done;
	nlohmann::json s = c_.labels;
	s.update({
		{"event", "summary"},
		{"world_size", topology_.size()},
		{"workers", tower_->workers()},
		{"transport", facts_.transport},
		{"steps", step_},
		{"global_batch", samples_per_step()},
		{"accumulate", c_.accumulate},
		{"skipped_steps", skipped_},
		{"loss_scale_log2", tower_->loss_scaler().log2_scale()},
		{"peak_memory_bytes", peak_memory_},
		{"samples_per_s", samples_per_s},
		{"train_s", train_s_},
		{"compute_s", compute_s_},
		{"allreduce_s", allreduce_s_},
		{"allreduce_bytes_per_step", facts_.moved_bytes_per_step},
		{"gradient_bytes_per_step", facts_.gradient_bytes_per_step},
		{"buckets", facts_.buckets},
		{"sharded_update", facts_.update_is_sharded},
		{"max_optimizer_state_bytes", max_over_ranks(topology_.world(), state_bytes)},
		{"total_optimizer_state_bytes", sum_over_ranks(topology_.world(), state_bytes)},
		{"replica_hash", fmt::format("{:016x}", hash)},
		{"checkpoints", checkpoints_},
		{"checkpoint_pause_s", checkpoint_s_},
		{"test_accuracy", evaluated && last_eval_.raw.classifies ? nlohmann::json(last_eval_.raw.accuracy) : nlohmann::json()},
		{"test_loss", evaluated ? nlohmann::json(last_eval_.raw.loss) : nlohmann::json()},
	});
	if (evaluated && !last_eval_.raw.classifies)
		s["test_perplexity"] = last_eval_.raw.perplexity();
	if (evaluated && !last_eval_.raw.classifies && c_.tokens_per_sample > 0)
		s["test_bits_per_token"] = bits_per_token(last_eval_.raw);
	if (c_.tokens_per_sample > 0)
		s["tokens_per_s"] = samples_per_s * static_cast<double>(c_.tokens_per_sample);
	s.update(strategy_metrics());
	s.update(tower_->optimizer().strategy().describe().details); // counters as they stand now
	if (!detached_totals_.is_null()) {
		s.update(detached_totals_);
		s["updates_per_s"] = static_cast<double>(step_) / std::max(train_s_, 1e-9);
	}
	if (tower_->has_averages())
		s["test_accuracy_ema"] = last_eval_.has_averaged && last_eval_.averaged.classifies
						 ? nlohmann::json(last_eval_.averaged.accuracy)
						 : nlohmann::json();
	return s;
}

std::string Trainer::Run::tally(uint64_t hash, double samples_per_s) const
{
	const std::string evaluation = !last_eval_.done ? std::string("test accuracy not measured")
		: last_eval_.raw.classifies ? fmt::format("test accuracy {:.2f}%", 100.0 * last_eval_.raw.accuracy)
					    : fmt::format("test perplexity {:.3f}", last_eval_.raw.perplexity());
	return fmt::format("done: {} steps ({} skipped) on {} rank(s), {} strategy, {:.0f} samples/s, {}, compute {:.1f} s, "
			   "communication {:.1f} s ({:.2f} MB per step, {}, {} {}(s)), replicas identical (hash {:016x})",
			   step_, skipped_, topology_.size(), facts_.name, samples_per_s, evaluation, compute_s_,
			   allreduce_s_, static_cast<double>(facts_.moved_bytes_per_step) / 1e6, facts_.transport,
			   facts_.buckets, facts_.bucket_word, hash);
}

} // namespace tower
