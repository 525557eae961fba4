// What the async and sync-replicas strategies share: workers that fetch variables from their
// owners, compute, and push gradients back without waiting for each other.
#include "runtime/strategies/fault_injection.h"
#include "runtime/strategies/detached/detached_strategy.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "collectives/transports/mpi_reduce_ops.h"
#include "collectives/signature_check.h"
#include "base/watchdog/backoff_wait.h"
#include "base/error.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"
#include "runtime/safety/replica_check.h"
#include "runtime/observe/timeline.h"
#include "base/clock.h"
#include "models/kernels/ops.h"

namespace tower {

namespace {

void check_options(const StrategyOptions& o, const std::string& name)
{
	const auto refuse = [&](bool given, const char* what) {
		if (given)
			throw AgreedError(fmt::format("{}: not available with `strategy` {}, whose workers push their own "
						      "gradients in f32 without a common step; drop it",
						      what, name));
	};
	refuse(!o.replicated.groups.empty(), "`groups`");
	refuse(o.gradients.compress != DType::f32, "`compress`");
	refuse(o.gradients.loss_scale.mode != LossScaleMode::none, "`loss_scale`");
	refuse(o.gradients.reduce != ReduceOp::mean, "`reduce` sum");
	const FaultInjection& f = faults_of(o);
	if (f.nonfinite_step >= 0 && f.nonfinite_rank < o.ps_ranks)
		throw AgreedError(fmt::format("`inject_nonfinite` '{}:{}': rank {} is a server, which computes no gradient "
					      "under `strategy` {}; name a worker, rank {} or above",
					      f.nonfinite_step + 1, f.nonfinite_rank, f.nonfinite_rank, name, o.ps_ranks));
}

} // namespace

DetachedStrategy::DetachedStrategy(const Topology& topology, const Device& device, const ParameterSet& parameters,
				   const OptimizerConfig& optimizer, const StrategyOptions& options,
				   std::unique_ptr<UpdateRule> rule, std::string name)
	: rank_(topology.rank()), world_(topology.world()), options_(options), rule_(std::move(rule)),
	  name_(std::move(name)), core_(topology, parameters.parameters, options)
{
	check_options(options_, name_);
	TOWER_CHECK(!device.is_cuda(), "`strategy` {} keeps its variables in host memory; run it with `device` cpu",
		    name_);
	const Placement& placement = core_.placement();
	int64_t offset = 0;
	for (size_t o = 0; o < placement.owners.size(); ++o) {
		segments_.push_back({placement.owners[o], offset, placement.owner_elements[o]});
		offset += placement.owner_elements[o];
	}
	values_.assign(static_cast<size_t>(offset), 0.0f);

	MPI_Comm comm = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_dup(world_, &comm));
	requests_ = CommHandle(comm);
	TOWER_MPI(MPI_Comm_dup(world_, &comm));
	replies_ = CommHandle(comm);

	// Every rank made the parameters from the same seed; the owners' copies count, and publish()
	// sends them to everyone.
	for (const VariableSlice& s : placement.slices) {
		float* at = values_.data() + segments_[static_cast<size_t>(s.owner)].offset + s.segment_offset;
		Tensor value = Tensor::view(at, {s.count}, DType::f32, Device{});
		value.copy_from(core_.model_slice(s, false));
		// The owner service binds each slice's gradient to its sum before any step.
		if (s.owner == core_.my_owner())
			core_.owned.push_back({s.name, value, Tensor::zeros({s.count}, DType::f32, Device{}), Tensor{}});
	}
	core_.start_owning(optimizer, options_.ema_decay);
	if (is_worker()) {
		for (const Segment& s : segments_)
			pushes_.emplace_back(sizeof(PushHeader) / sizeof(int64_t) + static_cast<size_t>(s.count + 1) / 2);
		if (core_.my_owner() >= 0)
			own_fetched_.assign(static_cast<size_t>(segments_[static_cast<size_t>(core_.my_owner())].count), 0.0f);
	}
	publish();
}

DetachedStrategy::~DetachedStrategy()
{
	// finish() joins the thread. A run that threw before it leaves the thread waiting for
	// messages; detaching lets the error reach the caller, which ends the job.
	if (owner_thread_.joinable())
		owner_thread_.detach();
}

void DetachedStrategy::start(const DetachedPlan& plan)
{
	TOWER_CHECK(!started_, "`strategy` {}: start() called twice", name_);
	started_ = true;
	if (core_.my_owner() < 0)
		return;
	const Segment& mine = segments_[static_cast<size_t>(core_.my_owner())];
	OwnerSetup s;
	s.requests = requests_.get();
	s.replies = replies_.get();
	s.chief = core_.my_owner() == 0;
	s.workers = workers();
	s.first_worker_rank = core_.servers();
	s.values = values_.data() + mine.offset;
	s.count = mine.count;
	s.owned = &core_.owned;
	s.optimizer = core_.optimizer();
	s.averages = core_.averages();
	s.global_step = &core_.steps();
	s.rule = rule_.get();
	s.target = rule_->target_updates(plan.planned_steps);
	s.lr = plan.lr;
	s.log_every = plan.log_every;
	s.on_window = plan.on_window;
	s.on_applied = plan.on_applied;
	owner_ = std::make_unique<OwnerService>(std::move(s));
	owner_thread_ = std::thread([this] { owner_->run(); });
}

void DetachedStrategy::ask(size_t owner, int tag, const int64_t* min_step, ReplyHeader* head, MPI_Request* requests)
{
	// Both receives are posted before the request leaves, so the owner's sends never wait for us.
	const Segment& s = segments_[owner];
	TOWER_MPI(MPI_Irecv(head, sizeof *head, MPI_BYTE, s.rank, tag_reply_head, replies_.get(), &requests[0]));
	TOWER_MPI(MPI_Irecv(fetched(owner), static_cast<int>(s.count), MPI_FLOAT, s.rank, tag_reply_values,
			    replies_.get(), &requests[1]));
	TOWER_MPI(MPI_Isend(min_step, 1, MPI_INT64_T, s.rank, tag, requests_.get(), &requests[2]));
}

bool DetachedStrategy::fetch(std::vector<int64_t>* tags)
{
	timeline::Span span("fetch", "comm"); // the token from the chief, then every owner's values
	// The chief's reply is the token: once it is granted, every other owner answers with the
	// values of at least the same update, so no worker computes ahead of the global step.
	ReplyHeader chief;
	MPI_Request requests[3];
	const int64_t none = 0;
	ask(0, tag_token, &none, &chief, requests);
	for (MPI_Request& r : requests)
		wait_with_backoff(r, "worker: waiting for a token from the chief");
	if (!chief.granted)
		return false;
	last_token_step_ = chief.step;
	tags->assign(segments_.size(), chief.step);
	std::vector<ReplyHeader> heads(segments_.size());
	std::vector<MPI_Request> pending(3 * segments_.size(), MPI_REQUEST_NULL);
	for (size_t o = 1; o < segments_.size(); ++o)
		ask(o, tag_values, &chief.step, &heads[o], &pending[3 * o]);
	for (MPI_Request& r : pending)
		wait_with_backoff(r, "worker: waiting for an owner's values");
	for (size_t o = 1; o < segments_.size(); ++o)
		(*tags)[o] = heads[o].step;
	last_tags_ = *tags;
	to_model();
	return true;
}

bool DetachedStrategy::push(const std::vector<int64_t>& tags, const StepRequest& request)
{
	timeline::Span span("push", "comm");
	span.arg("tag", tags.empty() ? -1 : tags[0]);
	// Every slice is gathered first: the finiteness of the whole gradient goes in every header,
	// so every owner drops or takes its slice alike.
	bool finite = true;
	for (size_t o = 0; o < segments_.size(); ++o) {
		float* gradient = push_gradient(o);
		for (const VariableSlice& s : core_.placement().slices)
			if (s.owner == static_cast<int>(o))
				Tensor::view(gradient + s.segment_offset, {s.count}, DType::f32, Device{})
					.copy_from(core_.model_slice(s, true));
		if (injecting() && segments_[o].count > 0 && std::all_of(segments_.begin(), segments_.begin() + static_cast<ptrdiff_t>(o),
									    [](const Segment& s) { return s.count == 0; }))
			gradient[0] = std::numeric_limits<float>::quiet_NaN(); // the first owner that holds anything
		if (request.micro_batches > 1)
			for (int64_t i = 0; i < segments_[o].count; ++i)
				gradient[i] /= static_cast<float>(request.micro_batches);
		finite = finite && all_finite(Tensor::view(gradient, {segments_[o].count}, DType::f32, Device{}));
	}
	std::vector<MPI_Request> requests(segments_.size());
	for (size_t o = 0; o < segments_.size(); ++o) {
		auto* head = reinterpret_cast<PushHeader*>(pushes_[o].data());
		*head = PushHeader{tags[o], request.samples, request.loss, request.lr, finite ? 0 : 1};
		const size_t bytes = sizeof(PushHeader) + static_cast<size_t>(segments_[o].count) * sizeof(float);
		TOWER_MPI(MPI_Isend(pushes_[o].data(), static_cast<int>(bytes), MPI_BYTE, segments_[o].rank, tag_push,
				    requests_.get(), &requests[o]));
	}
	for (MPI_Request& r : requests)
		wait_with_backoff(r, "worker: pushing a gradient");
	++pushed_;
	return finite;
}

float* DetachedStrategy::push_gradient(size_t owner)
{
	return reinterpret_cast<float*>(pushes_[owner].data() + sizeof(PushHeader) / sizeof(int64_t));
}

bool DetachedStrategy::injecting() const
{
	// --inject-nonfinite STEP:RANK counts this worker's own gradients: its STEP-th push.
	return pushed_ == faults_of(options_).nonfinite_step && rank_ == faults_of(options_).nonfinite_rank;
}

void DetachedStrategy::say_goodbye()
{
	std::vector<MPI_Request> requests(segments_.size());
	const int64_t nothing = 0;
	for (size_t o = 0; o < segments_.size(); ++o)
		TOWER_MPI(MPI_Isend(&nothing, 1, MPI_INT64_T, segments_[o].rank, tag_bye, requests_.get(), &requests[o]));
	for (MPI_Request& r : requests)
		wait_with_backoff(r, "worker: saying goodbye to the owners");
}

bool DetachedStrategy::begin_step()
{
	TOWER_CHECK(started_ && is_worker(), "`strategy` {}: begin_step() needs start() and a worker rank", name_);
	TOWER_CHECK(!in_step_, "`strategy` {}: begin_step() twice without a step() between", name_);
	if (stopped_)
		return false;
	const auto begin = Clock::now();
	if (!fetch(&tags_)) {
		say_goodbye();
		stopped_ = true;
		return false;
	}
	fetch_s_ = seconds_since(begin);
	in_step_ = true;
	return true;
}

StepStats DetachedStrategy::step(const StepRequest& request)
{
	TOWER_CHECK(in_step_, "`strategy` {}: step() without begin_step() before the step's forward: a worker computes "
		    "on the owners' values of a granted token", name_);
	in_step_ = false;
	StepStats stats;
	stats.micro_batches = request.micro_batches;
	if (rank_ == faults_of(options_).delay_rank)
		std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(faults_of(options_).delay_ms));
	const auto begin = Clock::now();
	stats.skipped = !push(tags_, request);
	stats.allreduce_s = fetch_s_ + seconds_since(begin);
	return stats;
}

nlohmann::json DetachedStrategy::finish()
{
	TOWER_CHECK(!is_worker() || stopped_, "`strategy` {}: finish() before this worker's begin_step() said the run "
		    "is over", name_);
	if (owner_) {
		wait_until("owner: waiting for its thread to serve the last worker", [&] { return owner_->done(); });
		owner_thread_.join();
	}
	MPI_Request barrier;
	TOWER_MPI(MPI_Ibarrier(world_, &barrier));
	wait_with_backoff(barrier, "finish: waiting for every rank to end training");
	publish();

	// Every owner's counters, so a test can check each; the chief's are the run's.
	constexpr int fields = 11;
	OwnerCounters mine = owner_ ? owner_->counters() : OwnerCounters{};
	const double local[fields] = {static_cast<double>(mine.updates), static_cast<double>(mine.received),
				      static_cast<double>(mine.applied), static_cast<double>(mine.dropped_stale),
				      static_cast<double>(mine.samples_applied), static_cast<double>(mine.staleness_sum),
				      static_cast<double>(mine.staleness_max), mine.loss_sum,
				      mine.cpu_s, mine.wall_s, static_cast<double>(mine.dropped_nonfinite)};
	int size = 0;
	TOWER_MPI(MPI_Comm_size(world_, &size));
	std::vector<double> all(static_cast<size_t>(fields * size));
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallgather(local, fields, MPI_DOUBLE, all.data(), fields, MPI_DOUBLE, world_, &request));
	wait_request(request, {"gather of the owners' counters", world_});
	nlohmann::json owners = nlohmann::json::array();
	for (const Segment& s : segments_) {
		const double* c = all.data() + fields * s.rank;
		OwnerCounters o;
		o.updates = static_cast<int64_t>(c[0]);
		o.received = static_cast<int64_t>(c[1]);
		o.applied = static_cast<int64_t>(c[2]);
		o.dropped_stale = static_cast<int64_t>(c[3]);
		o.samples_applied = static_cast<int64_t>(c[4]);
		o.staleness_sum = static_cast<int64_t>(c[5]);
		o.staleness_max = static_cast<int64_t>(c[6]);
		o.cpu_s = c[8];
		o.wall_s = c[9];
		o.dropped_nonfinite = static_cast<int64_t>(c[10]);
		nlohmann::json j = o.to_json();
		j["rank"] = s.rank;
		owners.push_back(j);
	}
	nlohmann::json totals = owners[0];
	totals.erase("rank");
	totals["owners"] = owners;
	totals["gradients_per_update_planned"] = rule_->gradients_per_update();
	return totals;
}

void DetachedStrategy::publish()
{
	for (const Segment& s : segments_) {
		const auto most = static_cast<int64_t>(mpi_max_count(DType::f32));
		for (int64_t at = 0; at < s.count; at += most) {
			MPI_Request request = MPI_REQUEST_NULL;
			TOWER_MPI(MPI_Ibcast(values_.data() + s.offset + at, static_cast<int>(std::min(most, s.count - at)),
					     MPI_FLOAT, s.rank, world_, &request));
			wait_request(request, {"broadcast of the final values", world_, s.rank});
		}
	}
	if (is_worker()) {
		// The owners are done: the master copy is final and nobody else writes it now.
		if (core_.my_owner() >= 0)
			std::copy_n(values_.data() + segments_[static_cast<size_t>(core_.my_owner())].offset, own_fetched_.size(),
				    own_fetched_.data());
		to_model();
	}
}

float* DetachedStrategy::fetched(size_t owner)
{
	return static_cast<int>(owner) == core_.my_owner() ? own_fetched_.data() : values_.data() + segments_[owner].offset;
}

void DetachedStrategy::to_model()
{
	for (const VariableSlice& s : core_.placement().slices)
		core_.model_slice(s, false).copy_from(Tensor::view(fetched(static_cast<size_t>(s.owner)) + s.segment_offset,
							     {s.count}, DType::f32, Device{}));
}

void DetachedStrategy::use_averages(bool averaged)
{
	TOWER_CHECK(has_averages(), "use_averages({}) without `ema_decay`: no averages are kept", averaged);
	TOWER_CHECK(!owner_ || owner_->done(), "use_averages() while the owners still train; call finish() first");
	core_.averages()->swap_in(averaged);
	publish();
}

void DetachedStrategy::reset_optimizer_state()
{
	TOWER_CHECK(!owner_ || owner_->done(), "reset_optimizer_state() while the owners still train; call it before "
		    "start() or after finish()");
	if (core_.optimizer())
		core_.optimizer()->reset_state();
}

std::vector<NamedTensor> DetachedStrategy::variables()
{
	return core_.variables();
}

uint64_t DetachedStrategy::check_replicas() const
{
	return core_.check_replicas();
}

StrategyDescription DetachedStrategy::describe() const
{
	StrategyDescription f = core_.describe(name_);
	f.transport = "push to owners, fetch from owners";
	f.moved_bytes_per_step = 2 * f.gradient_bytes_per_step;
	f.layout = fmt::format("variables placed on the least-loaded owner by bytes; rank 0 is the chief:\n{}",
			       core_.placement().describe());
	if (f.layout.back() == '\n')
		f.layout.pop_back();
	return f;
}

} // namespace tower
