// Checkpoints of PyTorch programs: torch's own state under tower's names, and tower's Checkpointer.
#include "frameworks/torch/checkpoints.h"

#include <cstdio>

#include <fmt/format.h>

#include "base/error.h"
#include "collectives/tensor_collectives.h"
#include "frameworks/torch/process.h"
#include "frameworks/torch/torch_types.h"

namespace tower::torch_adapter {

namespace {

Tensor tower_view(const std::string& name, const at::Tensor& t)
{
	const std::optional<DType> type = tower_dtype(t.scalar_type());
	if (!type || !t.device().is_cpu() || !t.is_contiguous())
		throw Error(fmt::format("checkpoint variable '{}': a contiguous CPU tensor of float32, float64, float16, "
					"bfloat16, int32 or int64 is needed", name));
	return Tensor::view(t.data_ptr(), Shape(t.sizes().begin(), t.sizes().end()), *type, Device{});
}

} // namespace

TorchState::TorchState(std::string name, std::vector<std::pair<std::string, at::Tensor>> variables,
		       const std::vector<std::string>& parameters)
	: name_(std::move(name)), tensors_(std::move(variables))
{
	for (const std::string& p : parameters)
		for (const auto& [n, t] : tensors_)
			if (n == p)
				parameters_.push_back({n, tower_view(n, t), Tensor{}, {}});
	for (Parameter& p : parameters_)
		pointers_.push_back(&p);
}

void TorchState::update(std::vector<std::pair<std::string, at::Tensor>> variables)
{
	bool same = variables.size() == tensors_.size();
	for (size_t i = 0; same && i < variables.size(); ++i)
		same = variables[i].first == tensors_[i].first && variables[i].second.sizes() == tensors_[i].second.sizes();
	if (!same)
		throw Error(fmt::format("checkpoint state '{}': its variables changed names or shapes", name_));
	tensors_ = std::move(variables);
	for (Parameter& p : parameters_)
		for (const auto& [n, t] : tensors_)
			if (n == p.name)
				p.value = tower_view(n, t);
}

bool TorchState::saves_variables() const
{
	return topology().rank() == 0;
}

std::vector<NamedTensor> TorchState::variables()
{
	std::vector<NamedTensor> out;
	for (const auto& [n, t] : tensors_)
		out.push_back({name_.empty() ? n : name_ + "/" + n, tower_view(n, t)});
	return out;
}

void TorchState::variables_restored()
{
	TensorCollectives collectives(topology().world(), Device{});
	for (const auto& [n, t] : tensors_)
		collectives.broadcast(tower_view(n, t), 0, name_ + "/" + n);
}

Checkpoints::Checkpoints(const CheckpointConfig& config, std::vector<Checkpointed*> parts, const std::string& strategy)
	: checkpointer_(std::make_unique<Checkpointer>(topology(), config, std::move(parts), strategy,
						       [](const std::string& line) {
							       if (topology().rank() != 0)
								       return;
							       std::printf("tower.torch: %s\n", line.c_str());
							       std::fflush(stdout);
						       })),
	  closer_(add_closer([this] { close(); }))
{
}

Checkpoints::~Checkpoints()
{
	close();
}

Checkpointer& Checkpoints::open()
{
	if (!checkpointer_)
		throw Error("these checkpoints were closed (tower.torch.shutdown() closes them)");
	return *checkpointer_;
}

void Checkpoints::close()
{
	if (!checkpointer_)
		return;
	remove_closer(closer_);
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (finalized) {
		(void)checkpointer_.release(); // its communicator died with MPI; the process is ending
		return;
	}
	checkpointer_->wait();
	checkpointer_.reset();
}

double Checkpoints::save(int64_t step, const std::map<std::string, double>& totals)
{
	TrainingPosition p;
	p.step = step;
	p.update_in_epoch = step;
	p.samples_per_update = 1;
	p.totals = totals;
	return open().save(p);
}

std::optional<TrainingPosition> Checkpoints::restore()
{
	return open().restore(1);
}

} // namespace tower::torch_adapter
