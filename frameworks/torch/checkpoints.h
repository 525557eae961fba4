// Checkpoints of PyTorch programs through tower's Checkpointer: written whole or not at all,
// resumed at any world size and under any strategy that saves the same variables.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "runtime/checkpoint/checkpoint.h"

namespace tower::torch_adapter {

// State that torch holds rather than tower, under tower's names, for the Checkpointer: under
// replicated, one parameter group's parameters and its torch optimizer's state ("fc.weight",
// "fc.weight/momentum" or "/adam_m" and "/adam_v", "optimizer/step", ...), laid out as the
// owners of parameter-server save theirs, so that either strategy resumes the other's
// checkpoints. Every rank holds the same values: rank 0 saves, and a restore reaches the other
// ranks by broadcast.
class TorchState final : public Checkpointed {
public:
	// `variables` share torch's memory (a restore writes into them); `parameters` name those
	// among them whose shapes the state's variables take.
	TorchState(std::string name, std::vector<std::pair<std::string, at::Tensor>> variables,
		   const std::vector<std::string>& parameters);

	// Points the state at torch's tensors anew (torch may have made them since), with the same
	// names in the same order.
	void update(std::vector<std::pair<std::string, at::Tensor>> variables);

	const std::string& name() const override { return name_; }
	const std::vector<Parameter*>& parameters() const override { return pointers_; }
	bool saves_variables() const override;
	std::vector<NamedTensor> variables() override;
	// Collective: rank 0's restored values to every rank.
	void variables_restored() override;

private:
	std::string name_;
	std::vector<std::pair<std::string, at::Tensor>> tensors_;
	std::vector<Parameter> parameters_;
	std::vector<Parameter*> pointers_;
};

// A program's checkpoints in one directory: a step directory per save, a file per saving rank,
// the manifest last (docs/checkpoints.md).
class Checkpoints {
public:
	// Collective. `parts` (the group optimizers of an owner strategy, or TorchState under
	// replicated) must outlive it; `strategy` is recorded and said on a resume under another.
	Checkpoints(const CheckpointConfig& config, std::vector<Checkpointed*> parts, const std::string& strategy);
	// close(), if not closed yet.
	~Checkpoints();
	Checkpoints(const Checkpoints&) = delete;
	Checkpoints& operator=(const Checkpoints&) = delete;

	// Collective: the checkpoint of `step`, with the program's running totals. Returns once every
	// rank copied its variables; the files are written behind (poll(), wait()).
	double save(int64_t step, const std::map<std::string, double>& totals);
	// Not collective, cheap: moves a checkpoint in progress along (each step).
	void poll() { open().poll(); }
	// Collective: the checkpoint in progress is complete on disk; AgreedError if a rank failed.
	void wait() { open().wait(); }
	// Collective, where the config asks to resume: the newest valid checkpoint loaded into every
	// part, and where it stood; nullopt when not resuming.
	std::optional<TrainingPosition> restore();
	// Collective: wait(), then frees what the checkpoints hold of MPI. shutdown() closes it with
	// the reducers, in the order they were made. Idempotent.
	void close();
	bool closed() const { return checkpointer_ == nullptr; }

private:
	Checkpointer& open();
	std::unique_ptr<Checkpointer> checkpointer_;
	uint64_t closer_ = 0;
};

} // namespace tower::torch_adapter
