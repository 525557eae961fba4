// The gradient-level API: a distributed optimizer over any parameters whose gradients the program computes itself.
#include "runtime/distributed_optimizer.h"

#include "base/error.h"
#include "collectives/broadcast_named.h"
#include "runtime/options/field_rules.h"
#include "runtime/options/run_fields.h"
#include "runtime/safety/run_fingerprint.h"
#include "runtime/strategies/strategy.h"

namespace tower {

// What the optimizers made with share= have in common with the one they share.
struct DistributedOptimizer::Shared {
	std::vector<Parameter*> parameters;
	std::unique_ptr<Strategy> strategy;
	const DistributedOptimizer* in_step = nullptr; // the one whose step is under way, if any
};

namespace {

// Rank 0's state, as for the parameters: every rank starts from the same scale.
void agree_on_scale(const Topology& topology, LossScaler& scaler)
{
	auto state = scaler.state();
	broadcast_named(topology, state, 0);
}

} // namespace

DistributedOptimizer::DistributedOptimizer(const Topology& topology, const Device& device,
					   std::vector<Parameter*> parameters, const OptimizerConfig& optimizer,
					   const StrategyOptions& options, const DistributedOptimizerSettings& settings)
	: shared_(std::make_shared<Shared>()), settings_(settings), scaler_(options.gradients.loss_scale),
	  topology_(topology), owns_state_(true)
{
	if (settings_.name.find('/') != std::string::npos)
		throw AgreedError(fmt::format("optimizer name '{}': its variables are saved as NAME/variable, so a name "
					      "holds no '/'", settings_.name));
	if (settings_.check_agreement) {
		RunFingerprint f;
		f.add("optimizer name", settings_.name);
		describe_fields(f, strategy_fields(), options);
		describe_fields(f, optimizer_fields(), optimizer);
		// The parameters are compared by the strategy, which names the first that differs.
		f.add("compute type", dtype_name(settings_.compute_type));
		describe_build(f);
		check_run_agreement(topology.world(), f);
	}
	shared_->parameters = std::move(parameters);
	shared_->strategy = make_strategy(topology, device, {shared_->parameters, settings_.compute_type}, optimizer,
					  options);
	agree_on_scale(topology, scaler_);
}

DistributedOptimizer::DistributedOptimizer(DistributedOptimizer& shared, const std::string& name)
	: shared_(shared.shared_), settings_(shared.settings_), scaler_(shared.scaler_.options()),
	  topology_(shared.topology_), owns_state_(false)
{
	settings_.name = name;
	if (name.find('/') != std::string::npos)
		throw AgreedError(fmt::format("optimizer name '{}': its variables are saved as NAME/variable, so a name "
					      "holds no '/'", name));
	TOWER_CHECK(name != shared.name(), "an optimizer that shares '{}''s state needs a name of its own", name);
	agree_on_scale(topology_, scaler_);
}

DistributedOptimizer::~DistributedOptimizer() = default;

const std::vector<Parameter*>& DistributedOptimizer::parameters() const
{
	return shared_->parameters;
}

Strategy& DistributedOptimizer::strategy() const
{
	return *shared_->strategy;
}

void DistributedOptimizer::check_no_other_step() const
{
	const DistributedOptimizer* other = shared_->in_step;
	if (other != nullptr && other != this)
		throw Error(fmt::format("optimizer '{}': a step begins while '{}', which shares its state, is inside one; "
					"finish that step() first", name(), other->name()));
}

void DistributedOptimizer::enter_step()
{
	check_no_other_step();
	shared_->in_step = this;
}

bool DistributedOptimizer::begin_step()
{
	TOWER_CHECK(phase_ == Phase::idle, "optimizer '{}': begin_step() inside a step; call step() first", name());
	check_no_other_step();
	// Marked inside a step only once the strategy agreed: a fetch that throws leaves nothing behind.
	if (!strategy().begin_step())
		return false;
	shared_->in_step = this;
	phase_ = Phase::begun;
	passes_ = 0;
	return true;
}

BackwardPass DistributedOptimizer::backward_pass(bool last)
{
	TOWER_CHECK(is_worker(), "optimizer '{}': rank {} only serves variables and runs no backward pass", name(),
		    topology_.rank());
	if (phase_ == Phase::idle) {
		// The detached strategies' workers compute on values fetched for a token.
		TOWER_CHECK(strategy().detached() == nullptr, "optimizer '{}': call begin_step() before the step's first "
			    "forward: `strategy` {} fetches the values the forward must use", name(), facts().name);
		enter_step();
		phase_ = Phase::begun;
		passes_ = 0;
	}
	TOWER_CHECK(phase_ == Phase::begun, "optimizer '{}': a backward pass after the last one of the step; call "
		    "step() first", name());
	BackwardPass pass;
	pass.options.accumulate = passes_ > 0;
	pass.options.loss_scale = scaler_.scale();
	if (last) {
		pass.on_ready = strategy().begin_final_backward();
		phase_ = Phase::final_pass;
	}
	++passes_;
	return pass;
}

StepStats DistributedOptimizer::step(float lr, const BatchReport& report)
{
	if (is_worker())
		TOWER_CHECK(phase_ == Phase::final_pass, "optimizer '{}': step() without a last backward_pass(); pass "
			    "last = true to the pass step() follows", name());
	else
		enter_step();
	StepRequest request;
	request.lr = lr;
	request.loss_scale = scaler_.scale();
	request.micro_batches = passes_;
	request.samples = report.samples;
	request.loss = report.loss;
	request.settle = settings_.settle_values;
	phase_ = Phase::idle;
	passes_ = 0;
	shared_->in_step = nullptr;
	StepStats stats = strategy().step(request);
	stats.loss_scale_log2 = scaler_.log2_scale();
	scaler_.update(stats.skipped);
	return stats;
}

void DistributedOptimizer::reset_optimizer_state()
{
	TOWER_CHECK(shared_->in_step == nullptr, "optimizer '{}': reset_optimizer_state() inside a step", name());
	strategy().reset_optimizer_state();
}

std::vector<NamedTensor> DistributedOptimizer::named(std::vector<NamedTensor> variables) const
{
	if (!name().empty())
		for (NamedTensor& v : variables)
			v.name = name() + "/" + v.name;
	return variables;
}

std::vector<NamedTensor> DistributedOptimizer::variables()
{
	std::vector<NamedTensor> out = owns_state_ ? strategy().variables() : std::vector<NamedTensor>{};
	for (auto& s : scaler_.state())
		out.push_back(s);
	return named(std::move(out));
}

void DistributedOptimizer::variables_restored()
{
	if (owns_state_)
		strategy().variables_restored();
	// Rank 0 saves in every strategy that checkpoints: its loss scale is the run's.
	agree_on_scale(topology_, scaler_);
}

bool DistributedOptimizer::is_worker() const { return strategy().is_worker(); }
int DistributedOptimizer::worker_index() const { return strategy().worker_index(); }
int DistributedOptimizer::workers() const { return strategy().workers(); }
bool DistributedOptimizer::has_averages() const { return strategy().has_averages(); }
void DistributedOptimizer::use_averages(bool averaged) { strategy().use_averages(averaged); }
void DistributedOptimizer::settle_replicas() { strategy().settle_replicas(); }
void DistributedOptimizer::use_synced_values(bool synced) { strategy().use_synced_values(synced); }
uint64_t DistributedOptimizer::check_replicas() const { return strategy().check_replicas(); }
StrategyFacts DistributedOptimizer::facts() const { return strategy().facts(); }
DetachedRun* DistributedOptimizer::detached() { return strategy().detached(); }
bool DistributedOptimizer::saves_variables() const { return strategy().saves_variables(); }

} // namespace tower
