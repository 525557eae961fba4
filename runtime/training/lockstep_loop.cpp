// The lock-step loop (replicated, parameter-server, local-sgd): every rank takes each update together, epoch
// after epoch, with logging windows, replica checks and checkpoints between updates.
#include "runtime/strategies/fault_injection.h"
#include "runtime/training/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "base/mpi/mpi_check.h"
#include "base/tensor/memory.h"
#include "base/watchdog/collective_debug.h"
#include "base/watchdog/watched_wait.h"

namespace tower {

using Clock = SteadyClock;

nlohmann::json Trainer::Run::run_lockstep()
{
	int64_t first_update = 0;
	resume(&first_update);
	for (; epoch_ < c_.epochs && step_ < total_steps_; ++epoch_) {
		const int64_t updates = updates_per_epoch(c_, sampler_.steps_per_epoch());
		for (int64_t u = first_update; u < updates && step_ < total_steps_; ++u)
			train_step(epoch_, u);
		first_update = 0;
		const bool last = epoch_ + 1 == c_.epochs || step_ == total_steps_;
		if (test_.size() > 0 && c_.eval_every > 0 && (last || (epoch_ + 1) % c_.eval_every == 0))
			evaluate(epoch_);
	}
	tower_->optimizer().settle_replicas(); // a run that ran out of epochs before its steps
	if (checkpointer_.saving() && saved_step_ != step_)
		save_checkpoint();
	checkpointer_.wait();
	return finish();
}

void Trainer::Run::train_step(int epoch, int64_t update_in_epoch)
{
	timeline::Span span("step", "step"); // the whole update, logging and replica checks included
	span.arg("step", step_ + 1);
	lr_ = schedule_.lr(step_);
	set_wait_step(step_);
	const auto start = Clock::now();
	StepStats s;
	if (tower_->is_worker()) {
		const int64_t first = update_in_epoch * c_.accumulate;
		// The update's loss is the mean over all its micro-batches (each one's loss is a mean
		// over equally many samples), and its compute time theirs together.
		double earlier_loss = 0, earlier_compute_s = 0;
		for (int64_t m = first; m + 1 < first + c_.accumulate; ++m) {
			const auto micro_start = Clock::now();
			earlier_loss += tower_->accumulate(assemble(epoch, m)).loss;
			earlier_compute_s += seconds_since(micro_start);
		}
		const Batch& batch = assemble(epoch, first + c_.accumulate - 1);
		// A straggler: lock-step strategies wait for it inside the step.
		if (topology_.rank() == faults_of(c_.strategy).delay_rank)
			std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(faults_of(c_.strategy).delay_ms));
		s = tower_->step(batch, lr_);
		if (c_.accumulate > 1) {
			s.forward.loss = static_cast<float>((earlier_loss + s.forward.loss) / c_.accumulate);
			s.compute_s += earlier_compute_s;
		}
	} else {
		s = tower_->step(Batch{}, lr_);
	}
	record(s, seconds_since(start));
	if (step_ % c_.log_every == 0 || step_ == total_steps_) {
		timeline::Span sync("metrics sync", "wait");
		log_window();
	}
	if (c_.check_every > 0 && step_ % c_.check_every == 0) {
		timeline::Span check("check replicas", "wait");
		tower_->check_replicas();
	}
	// local-sgd ends on its synced model, which the last checkpoint holds.
	if (step_ == total_steps_)
		tower_->optimizer().settle_replicas();
	const bool epoch_done = update_in_epoch + 1 == updates_per_epoch(c_, sampler_.steps_per_epoch());
	next_epoch_ = epoch_done ? epoch + 1 : epoch;
	next_update_ = epoch_done ? 0 : update_in_epoch + 1;
	if (checkpointer_.due(step_))
		save_checkpoint();
	checkpointer_.poll();
}

const Batch& Trainer::Run::assemble(int epoch, int64_t micro_step)
{
	timeline::Span span("load batch", "data");
	return batcher_.assemble(sampler_.shard(epoch, micro_step));
}

void Trainer::Run::record(const StepStats& s, double took)
{
	++step_;
	if (observer_ != nullptr)
		observer_->stepped(step_);
	train_s_ += took;
	compute_s_ += s.compute_s;
	allreduce_s_ += s.allreduce_s;
	skipped_ += s.skipped ? 1 : 0;
	// A server has no batch: its steps count for time but not for the loss.
	window_.updates += 1;
	window_.worker_steps += tower_->is_worker() ? 1 : 0;
	window_.skipped += s.skipped ? 1 : 0;
	window_.loss += s.forward.loss;
	window_.compute_s += s.compute_s;
	window_.allreduce_s += s.allreduce_s;
	window_.hidden_s += s.allreduce_s * s.hidden_fraction;
	if (std::isfinite(s.grad_norm)) {
		window_.grad_norm += s.grad_norm;
		window_.finite_norms += 1;
	}
}

// The mean loss of the window's worker steps over every rank (a collective).
double Trainer::Run::window_loss()
{
	double sums[2] = {window_.loss, static_cast<double>(window_.worker_steps)};
	check_collective(topology_.world(), {"loss all-reduce", sizeof sums, DType::f64});
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, topology_.world(), &request));
	wait_request(request, {"loss of the logging window", topology_.world()});
	return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

void Trainer::Run::log_window()
{
	const double loss = window_loss();
	const double elapsed = seconds_since(window_.start);
	const auto window_steps = static_cast<double>(window_.updates);
	const double samples_per_s = window_steps * static_cast<double>(samples_per_step()) / std::max(elapsed, 1e-9);
	const double allreduce_ms = 1e3 * window_.allreduce_s / window_steps;
	const double grad_norm = window_.finite_norms ? window_.grad_norm / static_cast<double>(window_.finite_norms)
						      : std::numeric_limits<double>::quiet_NaN();
	peak_memory_ = std::max(peak_memory_, peak_memory_bytes(device_));
	ProgressState p;
	p.epoch = epoch_ + 1;
	p.epochs = c_.epochs;
	p.step = step_;
	p.steps = total_steps_;
	p.loss = static_cast<float>(loss);
	p.samples_per_s = samples_per_s;
	p.eta_s = train_s_ / static_cast<double>(std::max<int64_t>(step_ - resumed_step_, 1)) * static_cast<double>(total_steps_ - step_);
	p.extra = fmt::format("lr {:.4g}  |g| {:.3g}  scale 2^{:.2f}  skipped {}  comm {:.2f} ms/step", lr_, grad_norm,
			      tower_->loss_scaler().log2_scale(), skipped_, allreduce_ms);
	if (observer_ != nullptr)
		observer_->progressed(p);
	write(window_line(loss, samples_per_s, allreduce_ms, grad_norm));
	window_ = Window{};
}

nlohmann::json Trainer::Run::window_line(double loss, double samples_per_s, double allreduce_ms, double grad_norm) const
{
	const auto window_steps = static_cast<double>(window_.updates);
	nlohmann::json line = {{"event", "step"},
			       {"step", step_},
			       {"epoch", epoch_ + 1},
			       {"loss", loss},
			       {"lr", lr_},
			       {"samples_per_s", samples_per_s},
			       {"allreduce_ms", allreduce_ms},
			       {"allreduce_bytes", facts_.moved_bytes_per_step},
			       {"compute_ms", 1e3 * window_.compute_s / window_steps},
			       {"hidden_fraction", window_.allreduce_s > 0 ? window_.hidden_s / window_.allreduce_s : 0.0},
			       {"grad_norm", std::isfinite(grad_norm) ? nlohmann::json(grad_norm) : nlohmann::json()},
			       {"loss_scale_log2", tower_->loss_scaler().log2_scale()},
			       {"overflow_frequency", static_cast<double>(window_.skipped) / window_steps},
			       {"skipped_steps", skipped_},
			       {"peak_memory_bytes", peak_memory_}};
	if (c_.tokens_per_sample > 0)
		line["tokens_per_s"] = samples_per_s * static_cast<double>(c_.tokens_per_sample);
	line.update(strategy_metrics());
	return line;
}

} // namespace tower
