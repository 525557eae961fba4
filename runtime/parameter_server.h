// The parameter-server strategy: one owner per variable slice, gradients reduced to the owner,
// the optimizer applied once there, and the new values sent back to every worker.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "collectives/mpi_reduce_ops.h"
#include "runtime/ps_placement.h"
#include "runtime/strategy.h"
#include "runtime/variable_averages.h"

namespace tower {

// Who sends what to whom in one step (docs/strategies.md has the picture):
//  1. every worker packs its gradient owner by owner (one fused message per owner, in the
//     transport type) and reduces it to that owner;
//  2. each owner un-scales its reduced share and adds its sum of squares to one all-reduced
//     number, so every rank learns the global norm and whether any value is inf or NaN;
//  3. unless that number is non-finite, each owner applies the optimizer to its share (its
//     optimizer state exists nowhere else) and folds it into its moving averages;
//  4. each owner broadcasts its new values to the workers, which unpack them into their models.
// Owners keep their variables and state in host memory. With ps_ranks = K > 0, ranks 0..K-1 are
// owners only; otherwise every rank owns a share and trains.
class ParameterServerStrategy final : public Strategy {
	using Clock = std::chrono::steady_clock;

public:
	ParameterServerStrategy(const Topology& topology, const Device& device, Model& model,
				const OptimizerConfig& optimizer, const StrategyOptions& options);

	bool is_worker() const override { return worker_index_ >= 0; }
	int worker_index() const override { return worker_index_; }
	int workers() const override { return workers_; }
	ForwardResult accumulate(const Tensor& images, const Tensor& labels) override;
	StepStats step(const Tensor& images, const Tensor& labels, float lr) override;
	ForwardResult evaluate(const Tensor& images, const Tensor& labels) override;
	bool has_averages() const override { return averages_ != nullptr; }
	void use_averages(bool averaged) override;
	std::vector<NamedTensor> variables() override;
	bool saves_variables() const override { return my_owner_index_ >= 0; }
	void variables_restored() override;
	uint64_t check_replicas() const override;
	const LossScaler& loss_scaler() const override { return loss_scaler_; }
	StrategyFacts facts() const override;

	const Placement& placement() const { return placement_; }

private:
	// One owner and the ranks it serves: the workers, plus itself when it is a dedicated server.
	struct Channel {
		int owner = 0;        // world rank
		CommHandle comm;      // null on ranks outside it
		MPI_Comm raw = MPI_COMM_NULL;
		int root = 0;         // the owner's rank in comm
		int64_t offset = 0;   // of its segment in the owner-major buffers (elements)
		int64_t count = 0;
	};

	void make_channels(const Topology& topology);
	void take_initial_values();
	void pack_gradients(float factor);
	void poison_if_injecting();
	void reduce_to_owners();
	bool finish_owned(float factor, double* grad_norm);
	// Sends every owner's values to the workers and puts them into the workers' models.
	void publish();
	Tensor model_slice(const VariableSlice& s, bool gradient) const;
	Tensor buffer_slice(std::vector<float>& buffer, const VariableSlice& s) const;
	// Where owner o's segment starts in this rank's owner-major buffers.
	int64_t segment_base(int owner_index) const;
	size_t moved_bytes() const;

	const Topology& topology_;
	int rank_;
	Device device_;
	MPI_Comm world_;
	StrategyOptions options_;
	Model* model_;
	std::vector<Parameter*> parameters_;
	int worker_index_ = -1, workers_ = 0;
	int my_owner_index_ = -1; // index into placement_.owners, -1 when this rank owns nothing
	Placement placement_;
	std::vector<Channel> channels_;
	CommHandle worker_comm_;
	MpiReduceOps reduce_ops_;

	// Owner-major buffers: owner o's slices at channels_[o].offset, in placement order. A worker
	// holds all of them; a dedicated server only its own segment, at offset 0.
	// An owner's segment of gradients_ is reduced in place: it ends the reduction holding the sum.
	std::vector<float> gradients_;     // packed gradients, then an owner's reduced share
	std::vector<uint16_t> compressed_; // the same in the 16-bit transport type, when compressing
	std::vector<float> values_;        // the owners' variables; an owner's own segment is the master copy
	std::vector<Parameter> owned_;         // this rank's slices: views of values_ and the reduced share
	std::unique_ptr<Optimizer> optimizer_; // over owned_ only
	std::unique_ptr<VariableAverages> averages_;
	LossScaler loss_scaler_;
	int micro_batches_ = 0;
	// Steps taken, "strategy/global_step" (i64 [1], host) among an owner's variables.
	Tensor global_step_ = Tensor::zeros({1}, DType::i64, Device{});
	int64_t& steps() const { return *global_step_.data_as<int64_t>(); }
};

} // namespace tower
