// The owner side of the async and sync-replicas strategies: a thread that takes gradients from
// workers as they come, applies updates to this owner's variable slices and hands out tokens.
#include "runtime/strategies/detached/owner_service.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>

#include "collectives/transports/mpi_reduce_ops.h"
#include "base/watchdog/backoff_wait.h"
#include "base/error.h"
#include "base/fatal.h"
#include "base/mpi/mpi_check.h"
#include "runtime/observe/timeline.h"
#include "base/clock.h"

namespace tower {

namespace {

double now_s()
{
	return seconds(SteadyClock::now().time_since_epoch());
}

double thread_cpu_s()
{
	timespec t{};
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

} // namespace

nlohmann::json OwnerCounters::to_json() const
{
	return {{"updates", updates},
		{"gradients_received", received},
		{"gradients_applied", applied},
		{"dropped_stale", dropped_stale},
		{"dropped_nonfinite", dropped_nonfinite},
		{"samples_applied", samples_applied},
		{"gradients_per_update", updates ? static_cast<double>(applied) / static_cast<double>(updates) : 0.0},
		{"staleness_mean", applied ? static_cast<double>(staleness_sum) / static_cast<double>(applied) : 0.0},
		{"staleness_max", staleness_max},
		{"owner_cpu_s", cpu_s},
		{"owner_wall_s", wall_s}};
}

OwnerService::OwnerService(OwnerSetup setup) : s_(std::move(setup))
{
	TOWER_CHECK(s_.count <= static_cast<int64_t>(mpi_max_count(DType::f32)),
		    "an owner's segment of {} values does not fit one MPI message; use more owners", s_.count);
	sum_.assign(static_cast<size_t>(s_.count), 0.0f);
	// The optimizer reads each slice's gradient from the update being built.
	int64_t at = 0;
	for (Parameter& p : *s_.owned) {
		p.grad = Tensor::view(sum_.data() + at, {p.value.numel()}, DType::f32, Device{});
		at += p.value.numel();
	}
	taken_.assign(static_cast<size_t>(s_.workers), 0);
	in_flight_.assign(static_cast<size_t>(s_.workers), -1);
	// A resumed run's updates already applied took their tokens: the chief hands out only the
	// rest (async would otherwise grant a whole run's again, and drop the surplus at the end).
	given_total_ = *s_.global_step * s_.rule->gradients_per_update();
	window_clock_ = now_s();
}

void OwnerService::run()
{
	timeline::name_thread("owner");
	const double cpu_start = thread_cpu_s(), wall_start = now_s();
	const size_t largest = sizeof(PushHeader) + static_cast<size_t>(s_.count) * sizeof(float);
	std::vector<int64_t> buffer((largest + sizeof(int64_t) - 1) / sizeof(int64_t) + 1);
	while (byes_ < s_.workers) {
		MPI_Request request;
		MPI_Status status;
		TOWER_MPI(MPI_Irecv(buffer.data(), static_cast<int>(buffer.size() * sizeof(int64_t)), MPI_BYTE,
				    MPI_ANY_SOURCE, MPI_ANY_TAG, s_.requests, &request));
		wait_with_backoff(request, "owner: waiting for the next worker message", &status);
		const auto* push = reinterpret_cast<const PushHeader*>(buffer.data());
		const auto* gradient = reinterpret_cast<const float*>(buffer.data() + sizeof(PushHeader) / sizeof(int64_t));
		handle(status.MPI_TAG, status.MPI_SOURCE, buffer[0], push, gradient);
	}
	maybe_log_window(true);
	counters_.cpu_s = thread_cpu_s() - cpu_start;
	counters_.wall_s = now_s() - wall_start;
	done_.store(true);
}

void OwnerService::handle(int tag, int source, int64_t min_step, const PushHeader* push, const float* gradient)
{
	switch (tag) {
	case tag_token:
		answer_token(source);
		break;
	case tag_values:
		if (*s_.global_step >= min_step)
			reply(source, true);
		else
			waiting_values_.emplace_back(source, min_step);
		break;
	case tag_push:
		take_gradient(source, *push, gradient);
		break;
	case tag_bye:
		++byes_;
		break;
	default:
		TOWER_CHECK(false, "owner: message with unknown tag {} from rank {}", tag, source);
	}
}

void OwnerService::answer_token(int source)
{
	TOWER_CHECK(s_.chief, "rank {} asked an owner that is not the chief for a token", source);
	const auto w = static_cast<size_t>(source - s_.first_worker_rank);
	TokenBook book;
	book.step = *s_.global_step;
	book.target = s_.target;
	book.given_this_step = given_this_step_;
	book.given_total = given_total_;
	book.taken_by_worker = taken_[w];
	book.worker = static_cast<int>(w);
	for (const int64_t t : in_flight_)
		if (t >= 0) {
			book.oldest_in_flight = book.in_flight ? std::min(book.oldest_in_flight, t) : t;
			++book.in_flight;
		}
	switch (s_.rule->token(book)) {
	case TokenAnswer::grant:
		++given_this_step_;
		++given_total_;
		++taken_[w];
		in_flight_[w] = *s_.global_step;
		reply(source, true);
		break;
	case TokenAnswer::wait:
		waiting_tokens_.push_back(source);
		break;
	case TokenAnswer::stop:
		reply(source, false);
		break;
	}
}

void OwnerService::reply(int source, bool granted)
{
	// The worker posted both receives before it asked, so these sends complete promptly.
	const ReplyHeader head{granted ? 1 : 0, *s_.global_step};
	MPI_Request requests[2];
	TOWER_MPI(MPI_Isend(&head, sizeof head, MPI_BYTE, source, tag_reply_head, s_.replies, &requests[0]));
	TOWER_MPI(MPI_Isend(s_.values, static_cast<int>(s_.count), MPI_FLOAT, source, tag_reply_values, s_.replies,
			    &requests[1]));
	wait_with_backoff(requests[0], "owner: sending a reply header");
	wait_with_backoff(requests[1], "owner: sending values");
}

void OwnerService::take_gradient(int source, const PushHeader& h, const float* gradient)
{
	if (s_.chief)
		in_flight_[static_cast<size_t>(source - s_.first_worker_rank)] = -1;
	++counters_.received;
	if (h.nonfinite) {
		drop_nonfinite(source, h);
		return;
	}
	counters_.loss_sum += h.loss;
	const int64_t step = *s_.global_step;
	if (step >= s_.target || !s_.rule->fresh(h.tag, step)) {
		timeline::Span dropped("drop stale gradient", "update");
		dropped.arg("tag", h.tag).arg("global_step", step);
		++counters_.dropped_stale;
		return;
	}
	const int64_t staleness = step - h.tag;
	const float factor = s_.rule->staleness_factor(staleness);
	for (int64_t i = 0; i < s_.count; ++i)
		sum_[static_cast<size_t>(i)] += factor * gradient[i];
	counters_.staleness_sum += staleness;
	counters_.staleness_max = std::max(counters_.staleness_max, staleness);
	window_max_ = std::max(window_max_, staleness);
	++counters_.applied;
	counters_.samples_applied += h.samples;
	carried_lr_ = h.lr;
	if (++accepted_ == s_.rule->gradients_per_update())
		apply_update();
}

void OwnerService::drop_nonfinite(int source, const PushHeader& h)
{
	// One worker's bad batch must not poison the variables every worker computes on (replicated
	// and parameter-server skip such a step on every rank; here only its gradient goes).
	timeline::Span dropped("drop non-finite gradient", "update");
	dropped.arg("tag", h.tag).arg("global_step", *s_.global_step);
	++counters_.dropped_nonfinite;
	if (!s_.chief)
		return;
	const auto w = static_cast<size_t>(source - s_.first_worker_rank);
	const int64_t step = *s_.global_step;
	fmt::print(stderr, "[rank {}] warning: dropped a non-finite gradient from worker {} (rank {}), computed on the "
		   "values of update {}; {} dropped so far\n",
		   world_rank_or_unknown(), w, source, h.tag, counters_.dropped_nonfinite);
	std::fflush(stderr);
	// Its token is granted again, so the run still applies every planned update (sync-replicas
	// would otherwise wait forever for the update's last gradient).
	if (step < s_.target && s_.rule->fresh(h.tag, step)) {
		if (h.tag == step) {
			given_this_step_ = std::max<int64_t>(given_this_step_ - 1, 0);
			taken_[w] = std::max<int64_t>(taken_[w] - 1, 0);
		}
		--given_total_;
		serve_waiting();
	}
}

void OwnerService::apply_update()
{
	timeline::Span span("apply", "update");
	span.arg("global_step", *s_.global_step + 1).arg("gradients", static_cast<int64_t>(accepted_));
	const float factor = s_.rule->factor();
	if (factor != 1.0f)
		for (float& g : sum_)
			g *= factor;
	if (s_.optimizer) {
		std::vector<Parameter*> owned;
		for (Parameter& p : *s_.owned)
			owned.push_back(&p);
		s_.optimizer->step(owned, lr_of_update(*s_.global_step));
	}
	applied_lr_ = lr_of_update(*s_.global_step);
	if (s_.averages)
		s_.averages->update();
	std::fill(sum_.begin(), sum_.end(), 0.0f);
	accepted_ = 0;
	++*s_.global_step;
	counters_.updates = *s_.global_step;
	if (s_.on_applied)
		s_.on_applied(*s_.global_step, *s_.global_step == s_.target);
	given_this_step_ = 0;
	std::fill(taken_.begin(), taken_.end(), 0);
	serve_waiting();
	maybe_log_window(false);
}

float OwnerService::lr_of_update(int64_t update) const
{
	return s_.lr ? s_.lr(s_.rule->planned_step(update)) : static_cast<float>(carried_lr_);
}

void OwnerService::serve_waiting()
{
	std::vector<int> tokens;
	tokens.swap(waiting_tokens_);
	for (const int source : tokens)
		answer_token(source);
	auto ready = [&](const std::pair<int, int64_t>& w) { return *s_.global_step >= w.second; };
	for (const auto& w : waiting_values_)
		if (ready(w))
			reply(w.first, true);
	std::erase_if(waiting_values_, ready);
}

void OwnerService::maybe_log_window(bool last)
{
	if (!s_.chief || !s_.on_window || s_.log_every <= 0)
		return;
	const bool due = last ? counters_.updates != window_start_.updates : counters_.updates % s_.log_every == 0;
	if (!due)
		return;
	OwnerCounters w = counters_;
	w.updates -= window_start_.updates;
	w.received -= window_start_.received;
	w.applied -= window_start_.applied;
	w.dropped_stale -= window_start_.dropped_stale;
	w.dropped_nonfinite -= window_start_.dropped_nonfinite;
	w.samples_applied -= window_start_.samples_applied;
	w.staleness_sum -= window_start_.staleness_sum;
	w.loss_sum -= window_start_.loss_sum;
	w.staleness_max = window_max_;
	const double elapsed = std::max(now_s() - window_clock_, 1e-9);
	nlohmann::json line = w.to_json();
	line.update({{"step", counters_.updates},
		     {"updates_planned", s_.target},
		     {"loss", w.received > w.dropped_nonfinite ? w.loss_sum / static_cast<double>(w.received - w.dropped_nonfinite) : 0.0},
		     {"lr", applied_lr_},
		     {"updates_per_s", static_cast<double>(w.updates) / elapsed},
		     {"samples_per_s", static_cast<double>(w.samples_applied) / elapsed}});
	s_.on_window(line);
	window_start_ = counters_;
	window_max_ = 0;
	window_clock_ = now_s();
}

} // namespace tower
