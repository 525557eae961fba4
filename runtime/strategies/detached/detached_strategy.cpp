// What the async and sync-replicas strategies share: workers that fetch variables from their
// owners, compute, and push gradients back without waiting for each other.
#include "runtime/detached_strategy.h"

#include <algorithm>
#include <cstring>

#include "collectives/mpi_reduce_ops.h"
#include "collectives/signature_check.h"
#include "runtime/backoff_wait.h"
#include "runtime/base/error.h"
#include "runtime/base/mpi_check.h"
#include "runtime/base/watched_wait.h"
#include "runtime/replica_check.h"
#include "runtime/timeline.h"

namespace tower {

namespace {

double seconds(std::chrono::steady_clock::duration d)
{
	return std::chrono::duration<double>(d).count();
}

void check_options(const StrategyOptions& o, const std::string& name, int world_size)
{
	if (o.ps_ranks < 0 || (o.ps_ranks > 0 && o.ps_ranks >= world_size))
		throw AgreedError(fmt::format("--ps-ranks {}: dedicated server ranks must leave at least one worker among "
					      "the {} rank(s) of this job; use 0 to place the variables on every rank",
					      o.ps_ranks, world_size));
	const auto refuse = [&](bool given, const char* what) {
		if (given)
			throw AgreedError(fmt::format("{}: not available with --strategy {}, whose workers push their own "
						      "gradients in f32 without a common step; drop it",
						      what, name));
	};
	refuse(!o.replicated.groups.empty(), "--groups");
	refuse(o.replicated.compress != DType::f32, "--compress");
	refuse(o.replicated.loss_scale.mode != LossScaleMode::none, "--loss-scale");
	refuse(o.replicated.inject_nonfinite_step >= 0, "--inject-nonfinite");
	refuse(o.replicated.reduce != ReduceOp::mean, "--reduce sum");
}

} // namespace

DetachedStrategy::DetachedStrategy(const Topology& topology, const Device& device, Model& model,
				   const OptimizerConfig& optimizer, const StrategyOptions& options,
				   std::unique_ptr<UpdateRule> rule, std::string name)
	: rank_(topology.rank()), world_(topology.world()), options_(options), rule_(std::move(rule)),
	  name_(std::move(name)), model_(&model), parameters_(model.parameters()),
	  global_step_(Tensor::zeros({1}, DType::i64, Device{})), loss_scaler_(options.replicated.loss_scale)
{
	check_options(options_, name_, topology.size());
	TOWER_CHECK(!device.is_cuda(), "--strategy {} keeps its variables in host memory; run it with --device cpu",
		    name_);
	std::vector<NamedTensor> gradients;
	for (const Parameter* p : parameters_)
		gradients.push_back({p->name, p->grad});
	check_signatures(world_, gradients, 0, "gradient list");

	const int servers = options_.ps_ranks;
	workers_ = topology.size() - servers;
	first_worker_ = servers;
	worker_index_ = rank_ >= servers ? rank_ - servers : -1;
	std::vector<int> owners;
	for (int r = 0; r < (servers > 0 ? servers : topology.size()); ++r)
		owners.push_back(r);
	std::vector<VariableSize> sizes;
	for (const Parameter* p : parameters_)
		sizes.push_back({p->name, p->value.numel()});
	placement_ = place_variables(sizes, owners);
	const auto mine = std::find(owners.begin(), owners.end(), rank_);
	my_owner_ = mine == owners.end() ? -1 : static_cast<int>(mine - owners.begin());
	int64_t offset = 0;
	for (size_t o = 0; o < owners.size(); ++o) {
		segments_.push_back({owners[o], offset, placement_.owner_elements[o]});
		offset += placement_.owner_elements[o];
	}
	values_.assign(static_cast<size_t>(offset), 0.0f);

	MPI_Comm comm = MPI_COMM_NULL;
	TOWER_MPI(MPI_Comm_dup(world_, &comm));
	requests_ = CommHandle(comm);
	TOWER_MPI(MPI_Comm_dup(world_, &comm));
	replies_ = CommHandle(comm);
	TOWER_MPI(MPI_Comm_split(world_, is_worker() ? 0 : MPI_UNDEFINED, rank_, &comm));
	worker_comm_ = CommHandle(comm);

	// Every rank built the model from the same seed; the owners' copies count, and publish()
	// sends them to everyone.
	for (const VariableSlice& s : placement_.slices) {
		float* at = values_.data() + segments_[static_cast<size_t>(s.owner)].offset + s.segment_offset;
		Tensor value = Tensor::view(at, {s.count}, DType::f32, Device{});
		value.copy_from(model_slice(s, false));
		if (s.owner == my_owner_)
			owned_.push_back({s.name, value, Tensor{}, Tensor{}});
	}
	if (!owned_.empty()) {
		// The owner service binds each slice's gradient to its sum before any step.
		std::vector<Parameter*> owned;
		for (Parameter& p : owned_) {
			p.grad = Tensor::zeros({p.value.numel()}, DType::f32, Device{});
			owned.push_back(&p);
		}
		optimizer_ = make_optimizer(optimizer, owned);
	}
	if (options_.ema_decay) {
		std::vector<NamedTensor> shares;
		for (const Parameter& p : owned_)
			shares.push_back({p.name, p.value});
		averages_ = std::make_unique<VariableAverages>(*options_.ema_decay, shares);
	}
	if (is_worker()) {
		for (const Segment& s : segments_)
			pushes_.emplace_back(sizeof(PushHeader) / sizeof(int64_t) + static_cast<size_t>(s.count + 1) / 2);
		if (my_owner_ >= 0)
			own_fetched_.assign(static_cast<size_t>(segments_[static_cast<size_t>(my_owner_)].count), 0.0f);
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

Tensor DetachedStrategy::model_slice(const VariableSlice& s, bool gradient) const
{
	const Parameter& p = *parameters_[s.variable];
	const Tensor& whole = gradient ? p.grad : p.value;
	char* at = static_cast<char*>(whole.data()) + static_cast<size_t>(s.offset) * sizeof(float);
	return Tensor::view(at, {s.count}, DType::f32, whole.device());
}

void DetachedStrategy::start(const DetachedPlan& plan)
{
	TOWER_CHECK(!started_, "--strategy {}: start() called twice", name_);
	started_ = true;
	if (my_owner_ < 0)
		return;
	const Segment& mine = segments_[static_cast<size_t>(my_owner_)];
	OwnerSetup s;
	s.requests = requests_.get();
	s.replies = replies_.get();
	s.chief = my_owner_ == 0;
	s.workers = workers_;
	s.first_worker_rank = first_worker_;
	s.values = values_.data() + mine.offset;
	s.count = mine.count;
	s.owned = &owned_;
	s.optimizer = optimizer_.get();
	s.averages = averages_.get();
	s.global_step = global_step_.data_as<int64_t>();
	s.rule = rule_.get();
	s.target = rule_->target_updates(plan.planned_steps);
	s.lr = plan.lr;
	s.log_every = plan.log_every;
	s.on_window = plan.on_window;
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

void DetachedStrategy::push(const std::vector<int64_t>& tags, const ForwardResult& result, int64_t samples)
{
	timeline::Span span("push", "comm");
	span.arg("tag", tags.empty() ? -1 : tags[0]);
	std::vector<MPI_Request> requests(segments_.size());
	for (size_t o = 0; o < segments_.size(); ++o) {
		auto* head = reinterpret_cast<PushHeader*>(pushes_[o].data());
		*head = PushHeader{tags[o], samples, static_cast<double>(result.loss), 0};
		auto* gradient = reinterpret_cast<float*>(pushes_[o].data() + sizeof(PushHeader) / sizeof(int64_t));
		for (const VariableSlice& s : placement_.slices)
			if (s.owner == static_cast<int>(o))
				Tensor::view(gradient + s.segment_offset, {s.count}, DType::f32, Device{})
					.copy_from(model_slice(s, true));
		if (micro_batches_ > 1)
			for (int64_t i = 0; i < segments_[o].count; ++i)
				gradient[i] /= static_cast<float>(micro_batches_);
		const size_t bytes = sizeof(PushHeader) + static_cast<size_t>(segments_[o].count) * sizeof(float);
		TOWER_MPI(MPI_Isend(pushes_[o].data(), static_cast<int>(bytes), MPI_BYTE, segments_[o].rank, tag_push,
				    requests_.get(), &requests[o]));
	}
	for (MPI_Request& r : requests)
		wait_with_backoff(r, "worker: pushing a gradient");
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

ForwardResult DetachedStrategy::accumulate(const Tensor& images, const Tensor& labels)
{
	TOWER_CHECK(is_worker(), "rank {} serves variables only and has no batch to accumulate", rank_);
	ForwardResult result;
	{
		timeline::Span span("forward", "compute");
		result = model_->forward(images, labels);
	}
	timeline::Span span("backward", "compute");
	BackwardOptions backward;
	backward.accumulate = micro_batches_ > 0;
	model_->backward({}, backward);
	++micro_batches_;
	return result;
}

bool DetachedStrategy::work(const Tensor& images, const Tensor& labels, StepStats* stats)
{
	TOWER_CHECK(started_ && is_worker(), "--strategy {}: work() needs start() and a worker rank", name_);
	if (stopped_)
		return false;
	*stats = StepStats{};
	const auto begin = Clock::now();
	std::vector<int64_t> tags;
	if (!fetch(&tags)) {
		say_goodbye();
		stopped_ = true;
		stats->allreduce_s = seconds(Clock::now() - begin);
		return false;
	}
	const auto compute = Clock::now();
	micro_batches_ = 0;
	stats->forward = accumulate(images, labels);
	stats->compute_s = seconds(Clock::now() - compute);
	if (rank_ == options_.inject_delay_rank)
		std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(options_.inject_delay_ms));
	push(tags, stats->forward, images.shape().empty() ? 0 : images.shape()[0]);
	micro_batches_ = 0;
	stats->allreduce_s = seconds(Clock::now() - begin) - stats->compute_s;
	return true;
}

StepStats DetachedStrategy::step(const Tensor& images, const Tensor& labels, float)
{
	StepStats stats;
	stats.skipped = !work(images, labels, &stats);
	return stats;
}

nlohmann::json DetachedStrategy::finish()
{
	TOWER_CHECK(!is_worker() || stopped_, "--strategy {}: finish() before this worker's last step", name_);
	if (owner_) {
		wait_until("owner: waiting for its thread to serve the last worker", [&] { return owner_->done(); });
		owner_thread_.join();
	}
	MPI_Request barrier;
	TOWER_MPI(MPI_Ibarrier(world_, &barrier));
	wait_with_backoff(barrier, "finish: waiting for every rank to end training");
	publish();

	// Every owner's counters, so a test can check each; the chief's are the run's.
	constexpr int fields = 10;
	OwnerCounters mine = owner_ ? owner_->counters() : OwnerCounters{};
	const double local[fields] = {static_cast<double>(mine.updates), static_cast<double>(mine.received),
				      static_cast<double>(mine.applied), static_cast<double>(mine.dropped_stale),
				      static_cast<double>(mine.samples_applied), static_cast<double>(mine.staleness_sum),
				      static_cast<double>(mine.staleness_max), mine.loss_sum,
				      mine.cpu_s, mine.wall_s};
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
		if (my_owner_ >= 0)
			std::copy_n(values_.data() + segments_[static_cast<size_t>(my_owner_)].offset, own_fetched_.size(),
				    own_fetched_.data());
		to_model();
	}
}

float* DetachedStrategy::fetched(size_t owner)
{
	return static_cast<int>(owner) == my_owner_ ? own_fetched_.data() : values_.data() + segments_[owner].offset;
}

void DetachedStrategy::to_model()
{
	for (const VariableSlice& s : placement_.slices)
		model_slice(s, false).copy_from(Tensor::view(fetched(static_cast<size_t>(s.owner)) + s.segment_offset,
							     {s.count}, DType::f32, Device{}));
}

ForwardResult DetachedStrategy::evaluate(const Tensor& images, const Tensor& labels)
{
	TOWER_CHECK(is_worker(), "rank {} serves variables only and holds no model to evaluate", rank_);
	return model_->forward(images, labels);
}

void DetachedStrategy::use_averages(bool averaged)
{
	TOWER_CHECK(averages_ != nullptr, "use_averages({}) without --ema-decay: no averages are kept", averaged);
	TOWER_CHECK(!owner_ || owner_->done(), "use_averages() while the owners still train; call finish() first");
	averages_->swap_in(averaged);
	publish();
}

std::vector<NamedTensor> DetachedStrategy::variables()
{
	std::vector<NamedTensor> out;
	for (const Parameter& p : owned_)
		out.push_back({p.name, p.value});
	if (optimizer_)
		for (auto& s : optimizer_->state())
			out.push_back(s);
	for (auto& s : loss_scaler_.state())
		out.push_back(s);
	if (averages_)
		for (auto& s : averages_->state())
			out.push_back(s);
	if (my_owner_ >= 0)
		out.push_back({"global_step", global_step_});
	return out;
}

uint64_t DetachedStrategy::check_replicas() const
{
	if (!is_worker())
		return 0;
	std::vector<NamedTensor> values;
	for (const Parameter* p : parameters_)
		values.push_back({p->name, p->value});
	return check_replicas_of(worker_comm_.get(), values);
}

StrategyFacts DetachedStrategy::facts() const
{
	StrategyFacts f;
	f.name = name_;
	f.transport = "push to owners, fetch from owners";
	for (const Parameter& p : owned_)
		f.parameter_bytes += p.value.bytes();
	if (optimizer_)
		for (const NamedTensor& s : optimizer_->state())
			if (s.tensor.dtype() == DType::f32)
				f.optimizer_state_bytes += s.tensor.bytes();
	for (const int64_t e : placement_.owner_elements)
		f.gradient_bytes_per_step += static_cast<size_t>(e) * sizeof(float);
	f.moved_bytes_per_step = 2 * f.gradient_bytes_per_step;
	f.buckets = segments_.size();
	f.bucket_word = "owner";
	std::vector<int> servers;
	for (int r = 0; r < options_.ps_ranks; ++r)
		servers.push_back(r);
	f.details = {{"placement", placement_.to_json()}, {"ps_ranks", options_.ps_ranks}, {"server_ranks", servers}};
	if (averages_)
		f.details["ema_bytes"] = averages_->bytes();
	f.layout = fmt::format("variables placed on the least-loaded owner by bytes; rank 0 is the chief:\n{}",
			       placement_.describe());
	if (f.layout.back() == '\n')
		f.layout.pop_back();
	return f;
}

} // namespace tower
