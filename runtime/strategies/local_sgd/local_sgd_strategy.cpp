// The local-sgd strategy (local SGD and DiLoCo): every worker takes H steps of its own optimizer
// on its own data, then the workers average how far they moved and an outer optimizer applies it.
#include "runtime/strategies/local_sgd/local_sgd_strategy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/watchdog/watched_wait.h"
#include "collectives/broadcast_named.h"
#include "models/kernels/ops.h"
#include "runtime/observe/timeline.h"
#include "runtime/safety/replica_check.h"
#include "runtime/strategies/fault_injection.h"

namespace tower {

namespace {

const char* compression_name(OuterCompression c)
{
	switch (c) {
	case OuterCompression::none: return "f32";
	case OuterCompression::bf16: return "bf16";
	case OuterCompression::int8: return "int8 blocks";
	}
	return "f32";
}

void check_options(const StrategyOptions& o, const Device& device)
{
	const auto refuse = [&](bool given, const std::string& what, const char* instead) {
		if (given)
			throw AgreedError(fmt::format("{}: not available with `strategy` local-sgd; {}", what, instead));
	};
	refuse(o.gradients.compress != DType::f32, "`compress`",
	       "its workers send no gradients: compress the outer all-reduce with `outer_compress` bf16 or int8");
	refuse(o.gradients.loss_scale.mode != LossScaleMode::none, "`loss_scale`",
	       "each worker steps on its own gradients: train in fp32 or bf16 precision");
	refuse(o.gradients.reduce != ReduceOp::mean, "`reduce` sum", "the pseudo-gradients are averaged: drop it");
	refuse(!o.replicated.groups.empty(), "`groups`", "every worker syncs with every other: drop it");
	refuse(o.ps_ranks != 0, fmt::format("`ps_ranks` {}", o.ps_ranks), "every rank is a worker: drop it");
	refuse(o.ema_decay.has_value(), "`ema_decay`", "the synced values are the model it evaluates: drop it");
	refuse(device.is_cuda(), "`device` cuda", "it keeps its synced values in host memory: run it with `device` cpu");
	const LocalSgdOptions& l = o.local_sgd;
	if (l.sync_every < 1)
		throw AgreedError(fmt::format("`sync_every` {}: give H >= 1 inner steps between syncs", l.sync_every));
	if (l.outer_optimizer != "sgd" && l.outer_optimizer != "nesterov")
		throw AgreedError(fmt::format("`outer_optimizer` {}: write sgd (with `outer_lr` 1: plain averaging) or "
					      "nesterov (DiLoCo's)", l.outer_optimizer));
	if (!(l.outer_lr > 0) || !std::isfinite(l.outer_lr))
		throw AgreedError(fmt::format("`outer_lr` {}: give a rate > 0 (DiLoCo's is 0.7; 1 with sgd averages)", l.outer_lr));
	if (!(l.outer_momentum >= 0 && l.outer_momentum < 1))
		throw AgreedError(fmt::format("`outer_momentum` {}: give a value in [0, 1)", l.outer_momentum));
	if (l.outer_delay < 0 || (l.outer_delay > 0 && !l.overlap))
		throw AgreedError(fmt::format("`outer_delay` {}: it says when an overlapped sync's mean lands; set "
					      "`outer_overlap` true, or drop it", l.outer_delay));
}

OptimizerConfig outer_config(const LocalSgdOptions& l)
{
	OptimizerConfig c;
	if (l.outer_optimizer == "sgd") {
		c.name = "sgd";
	} else {
		c.name = "momentum";
		c.momentum = l.outer_momentum;
		c.nesterov = true;
	}
	return c;
}

std::string worker_prefix(int worker)
{
	return fmt::format("local_sgd/worker{}/", worker);
}

} // namespace

LocalSgdStrategy::LocalSgdStrategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
				   const OptimizerConfig& optimizer, const StrategyOptions& options)
	: topology_(topology), rank_(topology.rank()), size_(topology.size()), options_(options.local_sgd),
	  parameters_(parameters.parameters)
{
	check_options(options, device);
	faults_ = faults_of(options);
	// Every worker starts from rank 0's values, and so does the anchor.
	std::vector<NamedTensor> values;
	for (Parameter* p : parameters_) {
		values.push_back({p->name, p->value});
		count_ += p->value.numel();
		p->working = Tensor{}; // this strategy writes the values in ways no 16-bit copy follows
	}
	broadcast_named(topology_, values, 0);
	inner_ = make_optimizer(optimizer, parameters_);

	if (options_.compress == OuterCompression::int8) {
		int8_ = std::make_unique<Int8Mean>(topology_.world());
	} else {
		all_reduce_ = make_all_reduce(topology_, device, options.replicated.mode, {}, options.replicated.all_reduce);
		if (options_.compress == OuterCompression::bf16)
			low_ = Tensor::view(all_reduce_->allocate(static_cast<size_t>(count_) * 2), {count_}, DType::bf16, Device{});
	}
	// The pseudo-gradient travels from where the all-reduce reads fastest (a node's shared window).
	pseudo_gradient_ = all_reduce_ && options_.compress == OuterCompression::none
		? Tensor::view(all_reduce_->allocate(static_cast<size_t>(count_) * sizeof(float)), {count_}, DType::f32, Device{})
		: Tensor::zeros({count_}, DType::f32, Device{});
	pseudo_gradient_.zero();
	anchor_values_ = Tensor::zeros({count_}, DType::f32, Device{});
	int64_t at = 0;
	for (Parameter* p : parameters_) {
		const int64_t n = p->value.numel();
		Parameter a{p->name, Tensor::view(anchor_values_.data_as<float>() + at, p->value.shape(), DType::f32, Device{}),
			    Tensor::view(pseudo_gradient_.data_as<float>() + at, p->value.shape(), DType::f32, Device{}), Tensor{}};
		a.value.copy_from(p->value);
		anchor_.push_back(a);
		at += n;
	}
	std::vector<Parameter*> anchor;
	for (Parameter& a : anchor_)
		anchor.push_back(&a);
	outer_ = make_optimizer(outer_config(options_), anchor);
	*saved_workers_.data_as<int64_t>() = -1;
	if (options_.overlap) {
		block_start_ = anchor_values_.clone();
		// The all-reduce has H steps to finish in, on the core the rank computes on: its waits
		// sleep rather than spin and yield, leaving the core to the inner steps.
		comm_thread_ = std::make_unique<CommThread>([] { set_background_waits(true); });
	}
}

LocalSgdStrategy::~LocalSgdStrategy() = default;

StepStats LocalSgdStrategy::step(const StepRequest& request)
{
	StepStats stats;
	stats.micro_batches = request.micro_batches;
	*saved_workers_.data_as<int64_t>() = size_;
	std::vector<Tensor> grads;
	for (Parameter* p : parameters_)
		grads.push_back(p->grad);
	const float factor = 1.0f / (static_cast<float>(request.micro_batches) * request.loss_scale);
	if (factor != 1.0f)
		for (const Tensor& g : grads)
			scale(g, factor);
	if (steps() == faults_.nonfinite_step && rank_ == faults_.nonfinite_rank && !grads.empty())
		grads[0].data_as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
	if (steps() < options_.local_start)
		return warm_up_step(request, grads, stats);
	// A bad batch costs this worker its step only.
	inner_step(request, grads, &stats);
	const int64_t since = ++*since_sync_.data_as<int64_t>();
	if (since >= options_.sync_every) {
		if (comm_thread_)
			overlapped_sync(&stats);
		else
			sync(&stats);
	} else if (comm_thread_ && since == options_.outer_delay && *pending_.data_as<int64_t>() != 0) {
		// The mean lands `outer_delay` steps into the block, at the same step on every rank: the
		// workers are apart by those steps only, not by the whole last block.
		apply_pending(&stats);
	}
	return stats;
}

// Post-local SGD's warm-up, the first local_start steps: the workers' gradients averaged (as the
// outer all-reduce sends, blocking also under overlap) and every worker takes the same step, the
// replicated strategy's, which a run needs while its rate warms up. Averaging the workers'
// parameters after each one's own step instead is another rule under Adam (each worker's step is
// normalized by its own moments): on the default GPT, 2 ranks, it left the workers at 3.3 where
// replicated was at 2.8 after 50 steps for one seed of three.
StepStats LocalSgdStrategy::warm_up_step(const StepRequest& request, const std::vector<Tensor>& grads,
					 StepStats stats)
{
	TOWER_CHECK(*since_sync_.data_as<int64_t>() == 0 && *pending_.data_as<int64_t>() == 0,
		    "local-sgd: a warm-up step with the workers apart (variables_restored meets them)");
	const auto begin = SteadyClock::now();
	{
		timeline::Span span("gradient all-reduce", "comm");
		copy_gradients(grads, true);
		average_pseudo_gradient(0, count_);
		copy_gradients(grads, false);
	}
	stats.allreduce_s += seconds_since(begin);
	stats.allreduce_bytes += static_cast<size_t>(payload_bytes());
	++syncs_;
	// The mean is the same bits on every rank: every worker takes or skips the step alike.
	inner_step(request, grads, &stats);
	// The synced values follow the workers, which stay equal: the first block starts from there.
	int64_t at = 0;
	float* anchor = anchor_values_.data_as<float>();
	for (Parameter* p : parameters_) {
		std::copy_n(p->value.data_as<float>(), p->value.numel(), anchor + at);
		at += p->value.numel();
	}
	if (comm_thread_)
		block_start_.copy_from(anchor_values_);
	return stats;
}

// The inner optimizer's step on `grads`, or none where they hold an inf or NaN (the inner state
// stays as it was); counted either way.
void LocalSgdStrategy::inner_step(const StepRequest& request, const std::vector<Tensor>& grads, StepStats* stats)
{
	stats->grad_norm = std::sqrt(sum_of_squares_all(grads));
	{
		timeline::Span span("inner step", "update");
		if (std::isfinite(stats->grad_norm))
			inner_->step(parameters_, request.lr);
		else
			stats->skipped = true, ++skipped_inner_;
	}
	++*step_counter_.data_as<int64_t>();
}

// The gradients into the flat buffer the outer all-reduce sends (`in`), or back out of it.
void LocalSgdStrategy::copy_gradients(const std::vector<Tensor>& grads, bool in)
{
	float* flat = pseudo_gradient_.data_as<float>();
	int64_t at = 0;
	for (const Tensor& g : grads) {
		float* values = g.data_as<float>();
		if (in)
			std::copy_n(values, g.numel(), flat + at);
		else
			std::copy_n(flat + at, g.numel(), values);
		at += g.numel();
	}
}

void LocalSgdStrategy::settle_replicas()
{
	if (comm_thread_)
		drain_pending();
	if (*since_sync_.data_as<int64_t>() > 0) {
		StepStats ignored;
		sync(&ignored);
	}
}

void LocalSgdStrategy::use_synced_values(bool synced)
{
	TOWER_CHECK(synced == own_values_.empty(), "use_synced_values({}) twice in a row", synced);
	for (size_t i = 0; i < parameters_.size(); ++i) {
		if (synced) {
			own_values_.push_back(parameters_[i]->value.clone());
			parameters_[i]->value.copy_from(anchor_[i].value);
		} else {
			parameters_[i]->value.copy_from(own_values_[i]);
		}
	}
	if (!synced)
		own_values_.clear();
}

// Without overlap, and under overlap when settling: the block's mean applied before the workers go
// on, every worker restarting from the new anchor.
void LocalSgdStrategy::sync(StepStats* stats)
{
	timeline::Span span("outer sync", "comm");
	span.arg("step", steps());
	const auto begin = SteadyClock::now();
	// A mean still pending (settling, or a checkpoint resumed into the warm-up) lands first: the
	// pseudo-gradient below would overwrite it, and the pending flag would apply this one twice.
	if (comm_thread_)
		drain_pending();
	compute_pseudo_gradient(anchor_values_.data_as<float>());
	average_pseudo_gradient(0, count_);
	apply_outer_step(stats);
	restart_from_anchor();
	*since_sync_.data_as<int64_t>() = 0;
	++syncs_;
	stats->allreduce_s = seconds_since(begin);
	stats->allreduce_bytes = static_cast<size_t>(payload_bytes());
}

void LocalSgdStrategy::overlapped_sync(StepStats* stats)
{
	timeline::Span span("outer sync", "comm");
	span.arg("step", steps());
	*since_sync_.data_as<int64_t>() = 0;
	++syncs_;
	if (*pending_.data_as<int64_t>() != 0 && !finish_pending(stats)) {
		restart_from_anchor(); // this block's progress goes with the skipped one's
		return;
	}
	// This block's move, then the worker's parameters become the anchor (which now holds every
	// block before this one) plus that move: the next block starts there.
	compute_pseudo_gradient(block_start_.data_as<float>());
	const float* delta = pseudo_gradient_.data_as<float>();
	const float* anchor = anchor_values_.data_as<float>();
	float* start = block_start_.data_as<float>();
	int64_t at = 0;
	for (Parameter* p : parameters_) {
		float* v = p->value.data_as<float>();
		for (int64_t i = 0; i < p->value.numel(); ++i)
			start[at + i] = v[i] = anchor[at + i] - delta[at + i];
		at += p->value.numel();
	}
	*pending_.data_as<int64_t>() = 1;
	comm_thread_->submit([this] {
		timeline::Span job("outer all-reduce", "comm");
		const auto begin = SteadyClock::now();
		// In pieces, so that what the main thread sends meanwhile (the trainer's metrics, a
		// replica check) queues behind one piece on the link, not behind the whole model: in
		// one piece such a message waited the whole all-reduce, about a second at 100 Mbit/s.
		for (int64_t first = 0; first < count_; first += overlap_piece_values)
			average_pseudo_gradient(first, std::min(overlap_piece_values, count_ - first));
		job_s_ = seconds_since(begin);
	});
	stats->allreduce_bytes = static_cast<size_t>(payload_bytes());
}

bool LocalSgdStrategy::finish_pending(StepStats* stats)
{
	const auto begin = SteadyClock::now();
	{
		timeline::Span wait("wait for the outer all-reduce", "wait");
		comm_thread_->wait_all();
	}
	const double waited = seconds_since(begin);
	*pending_.data_as<int64_t>() = 0;
	stats->allreduce_s = job_s_;
	stats->hidden_fraction = job_s_ > 0 ? std::clamp(1.0 - waited / job_s_, 0.0, 1.0) : 0.0;
	job_s_ = 0;
	return apply_outer_step(stats);
}

void LocalSgdStrategy::drain_pending()
{
	if (*pending_.data_as<int64_t>() == 0)
		return;
	StepStats ignored;
	if (!apply_pending(&ignored))
		*since_sync_.data_as<int64_t>() = 0;
}

bool LocalSgdStrategy::apply_pending(StepStats* stats)
{
	if (!finish_pending(stats)) {
		restart_from_anchor();
		return false;
	}
	const float* anchor = anchor_values_.data_as<float>();
	float* start = block_start_.data_as<float>();
	int64_t at = 0;
	for (Parameter* p : parameters_) {
		float* v = p->value.data_as<float>();
		for (int64_t i = 0; i < p->value.numel(); ++i)
			v[i] = anchor[at + i] - (start[at + i] - v[i]);
		at += p->value.numel();
	}
	block_start_.copy_from(anchor_values_);
	return true;
}

void LocalSgdStrategy::compute_pseudo_gradient(const float* from)
{
	float* delta = pseudo_gradient_.data_as<float>();
	int64_t at = 0;
	for (Parameter* p : parameters_) {
		const float* v = p->value.data_as<float>();
		for (int64_t i = 0; i < p->value.numel(); ++i)
			delta[at + i] = from[at + i] - v[i];
		at += p->value.numel();
	}
}

bool LocalSgdStrategy::apply_outer_step(StepStats* stats)
{
	// The mean is the same bits on every rank, so every rank takes or skips the outer step alike.
	if (!all_finite(pseudo_gradient_)) {
		++skipped_syncs_;
		stats->skipped = true;
		return false;
	}
	timeline::Span outer("outer step", "update");
	std::vector<Parameter*> params;
	for (Parameter& a : anchor_)
		params.push_back(&a);
	outer_->step(params, options_.outer_lr);
	return true;
}

void LocalSgdStrategy::average_pseudo_gradient(int64_t at, int64_t n)
{
	float* values = pseudo_gradient_.data_as<float>() + at;
	switch (options_.compress) {
	case OuterCompression::none:
		all_reduce_->run_in_place(values, static_cast<size_t>(n), DType::f32, ReduceOp::mean);
		break;
	case OuterCompression::bf16: {
		const Tensor part = Tensor::view(values, {n}, DType::f32, Device{});
		const Tensor low = Tensor::view(static_cast<uint16_t*>(low_.data()) + at, {n}, DType::bf16, Device{});
		cpu_ops().cast(part, low, false);
		all_reduce_->run_in_place(low.data(), static_cast<size_t>(n), DType::bf16, ReduceOp::sum);
		cpu_ops().cast(low, part, false);
		scale(part, 1.0f / static_cast<float>(size_));
		break;
	}
	case OuterCompression::int8:
		int8_->run(values, n);
		break;
	}
}

void LocalSgdStrategy::restart_from_anchor()
{
	for (size_t i = 0; i < parameters_.size(); ++i)
		parameters_[i]->value.copy_from(anchor_[i].value);
	if (comm_thread_)
		block_start_.copy_from(anchor_values_);
}

int64_t LocalSgdStrategy::payload_bytes() const
{
	switch (options_.compress) {
	case OuterCompression::none: return count_ * 4;
	case OuterCompression::bf16: return count_ * 2;
	case OuterCompression::int8: return int8_bytes_of(count_);
	}
	return count_ * 4;
}

void LocalSgdStrategy::use_averages(bool averaged)
{
	throw Error(fmt::format("use_averages({}) under `strategy` local-sgd: it keeps no moving averages", averaged));
}

void LocalSgdStrategy::reset_optimizer_state()
{
	inner_->reset_state();
	outer_->reset_state();
}

std::vector<NamedTensor> LocalSgdStrategy::shared_state()
{
	std::vector<NamedTensor> out;
	for (Parameter& a : anchor_)
		out.push_back({a.name, a.value});
	for (NamedTensor& s : outer_->state())
		out.push_back({"local_sgd/outer/" + s.name, s.tensor, true});
	out.push_back({std::string(step_counter_name), step_counter_});
	out.push_back({"local_sgd/since_sync", since_sync_, true});
	out.push_back({"local_sgd/workers", saved_workers_, true});
	out.push_back({"local_sgd/pending", pending_, true});
	if (comm_thread_)
		out.push_back({"local_sgd/pending_mean", pseudo_gradient_, true});
	return out;
}

std::vector<NamedTensor> LocalSgdStrategy::own_state()
{
	const std::string prefix = worker_prefix(rank_);
	std::vector<NamedTensor> out;
	for (Parameter* p : parameters_)
		out.push_back({prefix + p->name, p->value, true});
	for (NamedTensor& s : inner_->state())
		out.push_back({prefix + s.name, s.tensor, true});
	if (comm_thread_)
		out.push_back({prefix + "block_start", block_start_, true});
	return out;
}

std::vector<NamedTensor> LocalSgdStrategy::variables()
{
	// An outer all-reduce in flight writes the pending mean: a checkpoint saves it once arrived.
	if (comm_thread_)
		comm_thread_->wait_all();
	std::vector<NamedTensor> out = rank_ == 0 ? shared_state() : std::vector<NamedTensor>{};
	for (NamedTensor& v : own_state())
		out.push_back(v);
	return out;
}

void LocalSgdStrategy::variables_restored()
{
	restore_state();
	if (steps() >= options_.local_start)
		return;
	// Resumed into the warm-up (a longer local_start than the checkpoint's step): its steps are
	// the same on every worker only from the same place and the same inner state. The workers meet
	// now, as at the end of a run, so that the next step's gradients are taken where they all
	// stand, and take rank 0's inner state (a checkpoint taken in the warm-up has it on every rank).
	settle_replicas();
	std::vector<NamedTensor> inner = inner_->state();
	broadcast_named(topology_, inner, 0);
}

void LocalSgdStrategy::restore_state()
{
	std::vector<NamedTensor> shared = shared_state();
	broadcast_named(topology_, shared, 0);
	const int64_t saved = *saved_workers_.data_as<int64_t>();
	const bool same_workers = saved == size_;
	if (*pending_.data_as<int64_t>() != 0) {
		// The checkpoint was taken under overlap with a sync's outer step still to apply.
		if (comm_thread_ && same_workers)
			return; // every worker read where its block started; the next sync applies the mean
		*pending_.data_as<int64_t>() = 0;
		if (comm_thread_) {
			StepStats ignored;
			apply_outer_step(&ignored); // the checkpoint's workers' mean, before this run's restart
		} else {
			// This run did not read the mean (it keeps no pending one): that sync is lost.
			restart_from_anchor();
			*since_sync_.data_as<int64_t>() = 0;
			if (rank_ == 0)
				fmt::print("local-sgd: the checkpoint's last sync was still to be applied (`outer_overlap` true) "
					   "and this run does not overlap: that sync is dropped and every worker restarts from "
					   "its synced values\n");
			if (same_workers)
				return;
		}
	} else if (same_workers) {
		// Every worker read its own parameters and inner state; with nothing pending its block
		// starts at the anchor (a checkpoint without overlap holds no block start).
		if (comm_thread_)
			block_start_.copy_from(anchor_values_);
		return;
	}
	// Another size (or another strategy's checkpoint): no worker's own drift can be matched to
	// this run's workers, so every worker restarts from the synced values with fresh inner state.
	restart_from_anchor();
	inner_->reset_state();
	*since_sync_.data_as<int64_t>() = 0;
	*saved_workers_.data_as<int64_t>() = size_;
	if (rank_ == 0)
		fmt::print("local-sgd: the checkpoint holds {}; every worker restarts from its synced values with fresh "
			   "inner optimizer state\n",
			   saved < 0 ? std::string("no worker's own state") : fmt::format("the state of {} workers", saved));
}

uint64_t LocalSgdStrategy::check_replicas() const
{
	std::vector<NamedTensor> anchor;
	for (const Parameter& a : anchor_)
		anchor.push_back({a.name, a.value});
	return check_replicas_of(topology_.world(), anchor);
}

StrategyDescription LocalSgdStrategy::describe() const
{
	StrategyDescription f;
	f.name = "local-sgd";
	const std::string mode = all_reduce_ ? std::string(all_reduce_mode_name(all_reduce_->mode())) + " all-reduce"
				 : int8_->size() <= Int8Mean::gather_ranks ? std::string("all-gather")
									   : std::string("all-to-all and all-gather");
	f.transport = fmt::format("{} of the pseudo-gradient in {} every {} steps{}", mode,
				  compression_name(options_.compress), options_.sync_every,
				  options_.overlap ? ", during the next steps" : "");
	f.bucket_word = "sync buffer";
	f.buckets = 1;
	f.parameter_bytes = 2 * static_cast<size_t>(count_) * sizeof(float); // the worker's and the anchor
	for (auto* o : {inner_.get(), outer_.get()})
		for (NamedTensor& s : o->state())
			if (s.tensor.dtype() == DType::f32)
				f.optimizer_state_bytes += s.tensor.bytes();
	const auto h = static_cast<size_t>(options_.sync_every);
	f.gradient_bytes_per_step = static_cast<size_t>(count_) * sizeof(float) / h;
	f.moved_bytes_per_step = static_cast<size_t>(payload_bytes()) / h;
	f.details = {{"sync_every", options_.sync_every},
		     {"local_start", options_.local_start},
		     {"outer_optimizer", options_.outer_optimizer},
		     {"outer_lr", options_.outer_lr},
		     {"outer_momentum", options_.outer_optimizer == "nesterov" ? options_.outer_momentum : 0.0f},
		     {"outer_compress", compression_name(options_.compress)},
		     {"outer_overlap", options_.overlap},
		     {"outer_delay", options_.outer_delay},
		     {"sync_bytes", payload_bytes()},
		     {"syncs", syncs_},
		     {"skipped_syncs", skipped_syncs_},
		     {"skipped_inner_steps", skipped_inner_}};
	return f;
}

std::unique_ptr<Strategy> make_local_sgd_strategy(const Topology& topology, const Device& device,
						  const ParameterSet& parameters, const OptimizerConfig& optimizer,
						  const StrategyOptions& options)
{
	return std::make_unique<LocalSgdStrategy>(topology, device, parameters, optimizer, options);
}

} // namespace tower
