// The core of tower.torch's DistributedOptimizer: gradients reduced as autograd finalizes them.
#include "frameworks/torch/gradient_reducer.h"

#include <cstdio>
#include <set>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "base/error.h"
#include "base/field_spelling.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"
#include "frameworks/torch/process.h"

namespace tower::torch_adapter {

namespace {

// Runs after autograd added a parameter's gradient into its .grad (AccumulateGrad's post-hook),
// on the thread that runs backward, without Python's lock.
class AccumulatedHook final : public torch::autograd::FunctionPostHook {
public:
	AccumulatedHook(GradientReducer* reducer, size_t index) : reducer_(reducer), index_(index) {}
	torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
						  const torch::autograd::variable_list&) override
	{
		reducer_->accumulated(index_);
		return outputs;
	}

private:
	GradientReducer* reducer_;
	size_t index_;
};

// What is wrong with this rank's parameters, or "".
std::string check_parameters(const std::vector<std::pair<std::string, at::Tensor>>& parameters)
{
	if (parameters.empty())
		return "no parameter that requires a gradient: there is nothing to train";
	std::set<std::string> seen;
	for (const auto& [name, t] : parameters) {
		if (!seen.insert(name).second)
			return fmt::format("parameter '{}' is named twice", name);
		if (!t.device().is_cpu())
			return fmt::format("parameter '{}' is on {}: tower.torch reduces CPU tensors (its GPU path is not built "
					   "yet; docs/torch.md)", name, t.device().str());
		if (t.scalar_type() != at::kFloat)
			return fmt::format("parameter '{}' is {}: tower.torch reduces float32 parameters (keep the "
					   "parameters in float32 and compute in 16 bits with autocast)",
					   name, c10::toString(t.scalar_type()));
		if (!t.requires_grad() || !t.is_leaf())
			return fmt::format("parameter '{}' is not a leaf that requires a gradient", name);
		if (!t.is_contiguous())
			return fmt::format("parameter '{}' is not contiguous", name);
	}
	return "";
}

// A rank whose partners are already inside a collective it cannot join: the job ends, saying why.
[[noreturn]] void end_job(const std::string& why)
{
	std::fprintf(stderr, "tower.torch: %s; ending the job\n", spelled(why).c_str());
	std::fflush(stderr);
	abort_job(1);
}

bool is_detached(const std::string& strategy)
{
	return strategy == "async" || strategy == "sync-replicas";
}

// What the adapter cannot run of the strategy and rule asked for, or "".
std::string check_strategy(const ReducerOptions& options)
{
	const std::string& name = options.strategy.name;
	const bool owners_apply = options.optimizer.name != "none";
	const bool detached = is_detached(name);
	if (!detached && options.steps != 0)
		return fmt::format("`steps` {} belongs to async and sync-replicas, whose chief plans the run's tokens; "
				   "`strategy` {} steps for as long as the program calls step()", options.steps, name);
	if (name == "replicated" && options.strategy.ema_decay)
		return "`ema_decay` under `strategy` replicated: the torch optimizer applies the update there; average "
		       "with torch.optim.swa_utils.AveragedModel, or use an owner strategy";
	if (name == "replicated")
		return owners_apply ? "under `strategy` replicated the wrapped torch optimizer applies the update" : "";
	if (!owners_apply)
		return fmt::format("under `strategy` {} tower applies the update: give its rule", name);
	if (detached && options.steps <= 0)
		return fmt::format("`strategy` {} needs the run's length, `steps` (lock-step steps; the chief hands out "
				   "the tokens for them and the run ends when they are spent); got {}", name, options.steps);
	if (detached && options.backward_passes_per_step != 1)
		return fmt::format("backward_passes_per_step {}: `strategy` {} pushes one gradient per token; sum the "
				   "passes yourself or use a lock-step strategy", options.backward_passes_per_step, name);
	return "";
}

} // namespace

GradientReducer::GradientReducer(std::vector<std::pair<std::string, at::Tensor>> parameters,
				 const ReducerOptions& options)
	: passes_per_step_(options.backward_passes_per_step)
{
	std::string problem = options.problem.empty() ? check_parameters(parameters) : options.problem;
	if (problem.empty())
		problem = check_strategy(options);
	if (problem.empty() && passes_per_step_ < 1)
		problem = fmt::format("backward_passes_per_step is {}; it must be 1 or more", passes_per_step_);
	agree(private_comm(), problem);
	std::vector<AgreedField> agreed = options.agreed;
	agreed.emplace_back("backward_passes_per_step", std::to_string(passes_per_step_));
	agreed.emplace_back("steps", std::to_string(options.steps));
	agree_on_fields(private_comm(), agreed, fmt::format("tower.torch.DistributedOptimizer '{}'", options.name));

	for (auto& [name, t] : parameters) {
		names_.push_back(name);
		tensors_.push_back(t);
		const Shape shape(t.sizes().begin(), t.sizes().end());
		parameters_.push_back({name, Tensor::view(t.data_ptr(), shape, DType::f32, Device{}),
				       Tensor::zeros(shape, DType::f32, Device{}), {}});
	}
	std::vector<Parameter*> pointers;
	for (Parameter& p : parameters_)
		pointers.push_back(&p);
	StrategyOptions strategy = options.strategy;
	strategy.replicated.shard_update = false; // every rank's torch optimizer applies the whole update
	applies_update_ = options.optimizer.name != "none";
	DistributedOptimizerSettings settings;
	settings.name = options.name;
	// A torch program may write its parameters in place between steps (clamp_, load_state_dict).
	settings.settle_values = true;
	// Builds the buckets or places the variables on their owners, and gives every parameter rank
	// 0's values or its owner's (written into torch's memory).
	optimizer_ = std::make_unique<DistributedOptimizer>(topology(), Device{}, std::move(pointers), options.optimizer,
							    strategy, settings);
	const auto f32 = at::TensorOptions().dtype(at::kFloat);
	// Where the strategy keeps the values in memory of its own (the parameter-server's shared
	// windows, where the owners' new values arrive), torch's parameters use that memory, as their
	// gradients use their buckets'.
	for (size_t i = 0; i < parameters_.size(); ++i)
		if (parameters_[i].value.data() != tensors_[i].data_ptr()) {
			value_views_.resize(parameters_.size());
			value_views_[i] = at::from_blob(parameters_[i].value.data(), tensors_[i].sizes(), f32);
			tensors_[i].set_data(value_views_[i]);
		}
	for (size_t i = 0; i < parameters_.size(); ++i) {
		bucket_views_.push_back(at::from_blob(parameters_[i].grad.data(), tensors_[i].sizes(), f32));
		accumulators_.push_back(torch::autograd::impl::grad_accumulator(tensors_[i]));
		hooks_.push_back(accumulators_.back()->add_post_hook(std::make_unique<AccumulatedHook>(this, i)));
	}
	passes_seen_.assign(parameters_.size(), 0);
	MPI_Comm_dup(MPI_COMM_WORLD, &flags_comm_);
	servers_ = options.strategy.name == "parameter-server" ? options.strategy.ps_ranks : 0;
	closer_ = add_closer([this] { close(); });
	detached_ = is_detached(options.strategy.name);
	local_ = options.strategy.name == "local-sgd";
	planned_steps_ = options.steps;
}

// The detached strategies: this rank's owner thread starts, and a worker fetches the values of
// its first token. No schedule in the plan: each update takes the learning rate its gradients
// carry from step(lr), which the program's own scheduler sets. Deferred to the run's first use,
// so that a checkpoint can be restored before the owners serve.
void GradientReducer::start_run()
{
	if (!detached_ || started_)
		return;
	started_ = true;
	DetachedPlan plan;
	plan.planned_steps = planned_steps_;
	optimizer_->detached()->start(plan);
	more_ = optimizer_->is_worker() && optimizer_->begin_step();
}

bool GradientReducer::more()
{
	start_run();
	return more_;
}

std::string GradientReducer::finish_run()
{
	if (!detached_ || !run_totals_.empty())
		return run_totals_;
	start_run();
	if (more_)
		throw Error(fmt::format("rank {} ends the run with a step still granted: call step() while more() is "
					"true", topology().rank()));
	run_totals_ = open().detached()->finish().dump();
	return run_totals_;
}

GradientReducer::~GradientReducer()
{
	close();
}

void GradientReducer::close()
{
	if (!optimizer_)
		return;
	remove_closer(closer_);
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (!finalized && servers_ > 0 && !run_ended_ && announce(Announced::end) != Announced::end)
		end_job(fmt::format("rank {} closed its optimizer while the first worker (rank {}) announced another "
				    "step: every worker must take the same number of steps",
				    topology().rank(), servers_));
	if (!finalized && detached_ && run_totals_.empty()) {
		if (!started_) {
			// No step was taken: a run of no steps, whose chief refuses every token at once.
			planned_steps_ = 0;
			start_run();
		}
		// The owners wait for this worker's gradient or its goodbye: without them the others
		// would wait forever.
		if (more_)
			end_job(fmt::format("rank {} closed its optimizer with a step still granted (`strategy` {}): loop "
					    "while more() is true, calling step() each time", topology().rank(),
					    open().facts().name));
		finish_run();
	}
	if (finalized && servers_ > 0)
		std::fprintf(stderr, "tower.torch: rank %d closes its optimizer after MPI ended: the servers were not told "
				     "the run is over, and the parameters that lived in tower's memory are now zeros\n",
			     topology().rank());
	for (size_t i = 0; i < tensors_.size(); ++i) {
		accumulators_[i]->del_post_hook(hooks_[i]);
		at::Tensor& grad = tensors_[i].mutable_grad();
		if (grad.defined() && grad.data_ptr() == bucket_views_[i].data_ptr())
			grad = finalized ? at::Tensor() : bucket_views_[i].clone();
	}
	bucket_views_.clear();
	// Parameters in the strategy's memory get memory of their own back, with the values they
	// hold (after MPI ended that memory is gone: zeros; the process is ending).
	for (size_t i = 0; i < value_views_.size(); ++i)
		if (value_views_[i].defined())
			tensors_[i].set_data(finalized ? at::zeros(tensors_[i].sizes()) : value_views_[i].clone());
	value_views_.clear();
	if (finalized) {
		(void)optimizer_.release(); // its communicators and windows died with MPI; the process is ending
		return;
	}
	optimizer_.reset();
	MPI_Comm_free(&flags_comm_);
}

DistributedOptimizer& GradientReducer::open() const
{
	if (!optimizer_)
		throw Error("this DistributedOptimizer was closed (tower.torch.shutdown() closes them all)");
	return *optimizer_;
}

size_t GradientReducer::bucket_count() const
{
	return open().facts().buckets;
}

uint64_t GradientReducer::check_replicas() const
{
	return open().check_replicas();
}

std::string GradientReducer::serves_only() const
{
	return fmt::format("rank {} only serves variables (`ps_ranks` {}): it runs serve(), which applies the "
			   "workers' updates until they end, and no backward() or step() of its own",
			   topology().rank(), servers_);
}

void GradientReducer::begin_step()
{
	if (servers_ > 0 && !open().is_worker())
		end_job(serves_only());
	pass_ = open().backward_pass(true);
	passes_seen_.assign(parameters_.size(), 0);
	in_step_ = true;
}

// Points the parameter's .grad at its place in the bucket. Autograd then adds into the bucket in
// place; after zero_grad(set_to_none=True) it hands over a tensor of its own, copied in once.
void GradientReducer::bind(size_t index, bool keep_values)
{
	at::Tensor& grad = tensors_[index].mutable_grad();
	const at::Tensor& view = bucket_views_[index];
	if (grad.defined() && grad.data_ptr() == view.data_ptr())
		return;
	if (keep_values && grad.defined())
		view.copy_(grad);
	else
		view.zero_();
	grad = view;
}

void GradientReducer::accumulated(size_t index)
{
	if (detached_ && !started_)
		throw Error(fmt::format("a backward pass on rank {} before the run began (`strategy` {}): call more() before "
					"the first forward, which fetches the owners' values the step computes on",
					topology().rank(), open().facts().name));
	if (detached_ && !more_)
		return; // this group's run is over on this worker; its other groups may still step
	if (!in_step_)
		begin_step();
	int& seen = passes_seen_[index];
	if (seen >= passes_per_step_)
		throw Error(fmt::format("parameter '{}' got a gradient {} times before step(): call optimizer.step() (or "
					"synchronize()) after each backward, or raise backward_passes_per_step to "
					"accumulate {} passes locally", names_[index], seen + 1, seen + 1));
	bind(index, true);
	if (++seen == passes_per_step_ && pass_.on_ready)
		pass_.on_ready(parameters_[index]);
}

// The first worker tells every rank what the workers do next (a step with its learning rate, a
// checkpoint of a step, or the end): a server has no loop of its own to read it from. Every rank
// says what it would announce; the first worker's word is the one every rank gets back.
Announced GradientReducer::announce(Announced what, float lr, int64_t step)
{
	double message[3] = {static_cast<double>(what), lr, static_cast<double>(step)};
	TOWER_MPI(MPI_Bcast(message, 3, MPI_DOUBLE, servers_, flags_comm_));
	const auto said = static_cast<Announced>(static_cast<int>(message[0]));
	run_ended_ = run_ended_ || said == Announced::end;
	announced_lr_ = static_cast<float>(message[1]);
	announced_step_ = static_cast<int64_t>(message[2]);
	return said;
}

Announced GradientReducer::serve_step(int64_t* at)
{
	DistributedOptimizer& optimizer = open();
	if (optimizer.is_worker())
		end_job(fmt::format("serve() on rank {}, which trains: only the ranks below `ps_ranks` serve",
				    topology().rank()));
	if (detached_) {
		finish_run(); // the owner thread serves; the run ends when the workers' tokens are spent
		return Announced::end;
	}
	if (run_ended_)
		return Announced::end;
	const Announced said = announce(Announced::end);
	if (said == Announced::checkpoint && at != nullptr)
		*at = announced_step_;
	if (said != Announced::step)
		return said;
	const StepStats stats = optimizer.step(announced_lr_);
	(void)stats;
	// The workers' used-parameter flags: a server used none.
	std::vector<unsigned char> flags(2 * parameters_.size(), 0);
	restore_unused(flags);
	return said;
}

void GradientReducer::announce_checkpoint(int64_t step)
{
	if (servers_ == 0)
		return;
	if (!open().is_worker())
		end_job(fmt::format("rank {} only serves: its serve() joins the workers' checkpoints; it saves none of its "
				    "own", topology().rank()));
	if (announce(Announced::checkpoint, 0.0f, step) != Announced::checkpoint)
		end_job(fmt::format("rank {} saves a checkpoint while the first worker (rank {}) takes a step or ends the "
				    "run: every worker saves at the same point", topology().rank(), servers_));
}

ReduceResult GradientReducer::synchronize(float lr)
{
	DistributedOptimizer& optimizer = open();
	// The other ranks are in the step's collectives already: a mismatch ends the job, with why.
	if (!optimizer.is_worker())
		end_job(serves_only());
	if (detached_)
		return push(lr);
	if (servers_ > 0 && announce(Announced::step, lr) != Announced::step)
		end_job(fmt::format("rank {} takes another step while the first worker (rank {}) ended the run or saves "
				    "a checkpoint: every worker must take the same number of steps", topology().rank(),
				    servers_));
	if (!in_step_)
		begin_step();
	// Whatever happens below, the next step starts afresh.
	struct EndStep {
		GradientReducer& r;
		~EndStep() { r.in_step_ = false; }
	} end_step{*this};
	const size_t n = parameters_.size();
	// Per parameter: used on this rank in this step; had a gradient before (n more flags).
	std::vector<unsigned char> flags(2 * n, 1);
	for (size_t i = 0; i < n; ++i) {
		flags[i] = passes_seen_[i] > 0 ? 1 : 0;
		if (passes_seen_[i] >= passes_per_step_)
			continue;
		if (passes_seen_[i] == 0) {
			// Not used on this rank in this step: it adds what its .grad holds (zeros after
			// zero_grad; zeros too if it has none), as in Horovod.
			flags[n + i] = tensors_[i].grad().defined() ? 1 : 0;
			bind(i, true);
		}
		if (pass_.on_ready)
			pass_.on_ready(parameters_[i]);
	}
	const StepStats stats = optimizer.step(lr);
	// Under local-sgd tower's rule applies the update (its warm-up averages the gradients inside
	// the strategy): an unused parameter steps on its zeros.
	if (!local_)
		restore_unused(flags);
	ReduceResult result;
	result.skipped = stats.skipped;
	result.grad_norm = stats.grad_norm;
	result.allreduce_s = stats.allreduce_s;
	result.hidden_fraction = stats.hidden_fraction;
	result.buckets = bucket_count();
	return result;
}

// The detached strategies' step on a worker: pushes each owner its slice (a parameter this rank
// did not use pushes what its .grad holds), then fetches the values of the next token, if the
// chief grants one. Not collective: workers do not wait for each other.
ReduceResult GradientReducer::push(float lr)
{
	start_run();
	if (!more_)
		throw Error(fmt::format("step() on rank {} after its run ended (`strategy` {}, `steps` spent): loop while "
					"more() is true", topology().rank(), open().facts().name));
	if (!in_step_)
		begin_step();
	in_step_ = false;
	for (size_t i = 0; i < parameters_.size(); ++i)
		if (passes_seen_[i] == 0)
			bind(i, true);
	const StepStats stats = optimizer_->step(lr);
	more_ = optimizer_->begin_step();
	ReduceResult result;
	result.skipped = stats.skipped;
	result.grad_norm = stats.grad_norm;
	result.allreduce_s = stats.allreduce_s;
	result.buckets = bucket_count();
	return result;
}

// A parameter no rank used, and that had no gradient on any rank, gets none back: the torch
// optimizer then skips it, as it would in a program of one process. The ranks decide together.
void GradientReducer::restore_unused(std::vector<unsigned char>& flags)
{
	const size_t n = parameters_.size();
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Iallreduce(MPI_IN_PLACE, flags.data(), static_cast<int>(flags.size()), MPI_UNSIGNED_CHAR, MPI_MAX,
				 flags_comm_, &request));
	wait_request(request, WaitSite{"used-parameter flags", flags_comm_});
	for (size_t i = 0; i < n; ++i)
		if (!flags[i] && !flags[n + i])
			tensors_[i].mutable_grad() = at::Tensor();
}

} // namespace tower::torch_adapter
