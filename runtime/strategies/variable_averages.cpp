// Exponential moving averages of variables, kept where their updates are applied.
#include "runtime/strategies/variable_averages.h"

#include "models/kernels/ops.h"
#include "base/error.h"

namespace tower {

void VariableAverages::check_decay(double decay)
{
	if (!(decay >= 0.0 && decay < 1.0))
		throw AgreedError(fmt::format("`ema_decay` {}: the decay of the moving averages must be in [0, 1), "
					      "e.g. 0.999", decay));
}

VariableAverages::VariableAverages(double decay, const std::vector<NamedTensor>& variables)
	: decay_(decay), variables_(variables)
{
	check_decay(decay);
	for (const NamedTensor& v : variables_) {
		TOWER_CHECK(v.tensor.dtype() == DType::f32, "moving average of '{}': only f32 variables are averaged",
			    v.name);
		shadows_.push_back(v.tensor.clone());
	}
}

void VariableAverages::update()
{
	TOWER_CHECK(!averaged_, "moving averages updated while the averages are swapped into the variables");
	const float keep = static_cast<float>(decay_);
	const float take = static_cast<float>(1.0 - decay_);
	for (size_t i = 0; i < shadows_.size(); ++i) {
		const Ops& ops = ops_for(shadows_[i].device());
		ops.scale(shadows_[i], keep);
		ops.accumulate(take, variables_[i].tensor, shadows_[i]);
	}
}

void VariableAverages::swap_in(bool averaged, bool writes)
{
	if (averaged == averaged_)
		return;
	if (writes && kept_.empty())
		for (const NamedTensor& v : variables_)
			kept_.push_back(Tensor::empty(v.tensor.shape(), v.tensor.dtype(), v.tensor.device()));
	for (size_t i = 0; writes && i < variables_.size(); ++i) {
		Tensor& variable = variables_[i].tensor;
		if (averaged) {
			kept_[i].copy_from(variable);
			variable.copy_from(shadows_[i]);
		} else {
			variable.copy_from(kept_[i]);
		}
	}
	averaged_ = averaged;
}

std::vector<NamedTensor> VariableAverages::state() const
{
	std::vector<NamedTensor> out;
	for (size_t i = 0; i < shadows_.size(); ++i)
		out.push_back({variables_[i].name + "/ema", shadows_[i]});
	return out;
}

size_t VariableAverages::bytes() const
{
	size_t total = 0;
	for (const Tensor& s : shadows_)
		total += s.bytes();
	return total;
}

} // namespace tower
