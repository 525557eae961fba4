// Small training runs shared by the engine's tests: a learnable synthetic data set and a runner.
#include "test/runtime/training_fixture.h"

#include <cmath>
#include <limits>
#include <random>

#include <doctest/doctest.h>

#include "base/clock.h"
#include "base/tensor/memory.h"
#include "data/batch_assembler.h"
#include "data/sampler.h"

namespace tower::test {

Dataset synthetic_dataset(int64_t count)
{
	Dataset d;
	d.count = count;
	d.rows = d.cols = 28;
	d.images.resize(static_cast<size_t>(count * 28 * 28));
	d.labels.resize(static_cast<size_t>(count));
	std::mt19937 gen(1234);
	std::uniform_real_distribution<float> noise(0.0f, 0.3f);
	for (int64_t i = 0; i < count; ++i) {
		const int32_t label = static_cast<int32_t>(gen() % 10);
		d.labels[static_cast<size_t>(i)] = label;
		for (int64_t p = 0; p < 784; ++p)
			d.images[static_cast<size_t>(i * 784 + p)] = noise(gen) + ((p / 78) == label ? 0.7f : 0.0f);
	}
	return d;
}

ModelEngine::ModelEngine(const Topology& topology, const Device& device, Model& model, Optimizer& optimizer,
			 const ReplicatedEngineOptions& options)
	: ReplicatedEngine(topology, device, {model.parameters(), model.precision()}, optimizer, options), model_(model),
	  scaler_(options.loss_scale)
{
}

ForwardResult ModelEngine::accumulate(const Tensor& images, const Tensor& labels)
{
	const ForwardResult result = model_.forward(images, labels);
	model_.backward({}, {passes_ > 0, scaler_.scale()});
	++passes_;
	return result;
}

StepStats ModelEngine::step(const Tensor& images, const Tensor& labels, float lr)
{
	const auto start = SteadyClock::now();
	const ForwardResult result = model_.forward(images, labels);
	const GradReadyFn ready = begin_final_backward();
	model_.backward(ready, {passes_ > 0, scaler_.scale()});
	wait_thread_stream(model_.parameters().front()->value.device());
	const double compute_s = seconds_since(start);
	StepRequest request;
	request.lr = lr;
	request.loss_scale = scaler_.scale();
	request.micro_batches = passes_ + 1;
	passes_ = 0;
	StepStats stats = ReplicatedEngine::step(request);
	stats.forward = result;
	stats.compute_s = compute_s;
	stats.loss_scale_log2 = scaler_.log2_scale();
	scaler_.update(stats.skipped);
	return stats;
}

std::vector<std::vector<float>> parameter_values(Model& model)
{
	std::vector<std::vector<float>> out;
	for (Parameter* p : model.parameters())
		out.push_back(p->value.to_host_f32());
	return out;
}

Trained run_training(const Topology& topology, const RunSpec& spec, const Dataset& data, int sampler_rank,
		     int sampler_world)
{
	const Device device = spec.device;
	auto model = make_model(spec.model, device);
	auto optimizer = make_optimizer(spec.optimizer, model->parameters());
	ModelEngine engine(topology, device, *model, *optimizer, spec.options);
	DistributedSampler sampler(data.count, spec.batch, sampler_rank < 0 ? topology.rank() : sampler_rank,
				   sampler_world < 0 ? topology.size() : sampler_world, 99);
	BatchAssembler assembler(data, spec.batch, device);
	Trained out;
	int64_t micro = 0;
	auto next = [&]() -> const ImageBatch& {
		const int64_t epoch = micro / sampler.steps_per_epoch();
		const ImageBatch& b = assembler.assemble(sampler.shard(epoch, micro % sampler.steps_per_epoch()));
		++micro;
		return b;
	};
	for (int s = 0; s < spec.steps; ++s) {
		for (int m = 1; m < spec.accumulate; ++m) {
			const ImageBatch& b = next();
			engine.accumulate(b.images, b.labels);
		}
		const ImageBatch& b = next();
		const StepStats stats = engine.step(b.images, b.labels, spec.lr);
		out.last_loss = stats.forward.loss;
		if (spec.after_step)
			spec.after_step(engine, stats, s);
	}
	out.hash = engine.check_replicas();
	out.parameters = parameter_values(*model);
	for (const NamedTensor& s : optimizer->state())
		if (s.tensor.dtype() == DType::f32)
			out.optimizer_state.push_back(s.tensor.to_host_f32());
	out.sharded = engine.update_is_sharded();
	return out;
}

double max_relative_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b)
{
	// Results of different shapes are not close, and an empty comparison proves nothing.
	bool same_shape = !b.empty() && a.size() == b.size();
	for (size_t t = 0; same_shape && t < a.size(); ++t)
		same_shape = a[t].size() == b[t].size();
	CHECK_MESSAGE(same_shape, "compared results differ in tensor count or sizes, or are empty");
	if (!same_shape)
		return std::numeric_limits<double>::infinity();
	double worst = 0;
	for (size_t t = 0; t < a.size(); ++t) {
		double diff = 0, norm = 0;
		for (size_t i = 0; i < a[t].size(); ++i) {
			const double d = static_cast<double>(a[t][i]) - b[t][i];
			diff += d * d;
			norm += static_cast<double>(b[t][i]) * b[t][i];
		}
		worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-30)));
	}
	return worst;
}

} // namespace tower::test
