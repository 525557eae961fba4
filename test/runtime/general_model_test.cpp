// The trainer with a model that is not an image classifier: a sample set of named vectors, a
// regression loss of the model's own, evaluation by loss and perplexity, N ranks equal to 1 rank.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "data/sample_batcher.h"
#include "data/sample_set.h"
#include "models/model.h"
#include "runtime/training/trainer.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

constexpr int inputs = 4, outputs = 3;

// Samples of two named vectors, "x" (f32 [4]) and "target" (f32 [3]): nothing image-like.
class Regression final : public SampleSet {
public:
	explicit Regression(int64_t count, int64_t offset) : count_(count), offset_(offset) {}
	int64_t size() const override { return count_; }
	std::vector<SampleField> fields() const override
	{
		return {{"x", DType::f32, {inputs}}, {"target", DType::f32, {outputs}}};
	}
	void copy_sample(int64_t index, const std::vector<void*>& out) const override
	{
		const double s = static_cast<double>(index + offset_);
		auto* x = static_cast<float*>(out[0]);
		auto* t = static_cast<float*>(out[1]);
		for (int j = 0; j < inputs; ++j)
			x[j] = static_cast<float>(std::sin(0.37 * s + 1.3 * j));
		for (int k = 0; k < outputs; ++k)
			t[k] = static_cast<float>(0.5 * x[k] - 0.25 * x[k + 1] + 0.1 * k);
	}
	std::string describe() const override { return fmt::format("{} regression samples from {}", count_, offset_); }

private:
	int64_t count_, offset_;
};

// y = W x + b with loss 1/(2B) sum ||y - target||^2; reads the batch's "x" and "target" by name.
class LinearRegression final : public Model {
public:
	LinearRegression()
	{
		std::vector<float> w(inputs * outputs);
		for (size_t i = 0; i < w.size(); ++i)
			w[i] = static_cast<float>(0.1 * std::cos(static_cast<double>(i)));
		w_ = {"w", Tensor::from_host(w, {outputs, inputs}, cpu_), Tensor::zeros({outputs, inputs}, DType::f32, cpu_), {}};
		b_ = {"b", Tensor::zeros({outputs}, DType::f32, cpu_), Tensor::zeros({outputs}, DType::f32, cpu_), {}};
	}
	std::vector<Parameter*> parameters() override { return {&w_, &b_}; }

	ForwardResult forward(const Batch& batch) override
	{
		x_ = batch.get("x");
		const Tensor& t = batch.get("target");
		const int64_t n = batch.samples();
		residual_.assign(static_cast<size_t>(n * outputs), 0.0f);
		double loss = 0;
		for (int64_t s = 0; s < n; ++s)
			for (int k = 0; k < outputs; ++k) {
				float r = b_.value.data_as<float>()[k] - t.data_as<float>()[s * outputs + k];
				for (int j = 0; j < inputs; ++j)
					r += w_.value.data_as<float>()[k * inputs + j] * x_.data_as<float>()[s * inputs + j];
				residual_[static_cast<size_t>(s * outputs + k)] = r;
				loss += 0.5 * r * r / static_cast<double>(n);
			}
		return {static_cast<float>(loss), -1};
	}

	void backward(const GradReadyFn& on_ready, const BackwardOptions& options) override
	{
		const int64_t n = x_.dim(0);
		float* gw = w_.grad.data_as<float>();
		float* gb = b_.grad.data_as<float>();
		for (int k = 0; k < outputs; ++k) {
			double db = 0;
			std::vector<double> dw(inputs, 0.0);
			for (int64_t s = 0; s < n; ++s) {
				const double r = residual_[static_cast<size_t>(s * outputs + k)] / static_cast<double>(n);
				db += r;
				for (int j = 0; j < inputs; ++j)
					dw[static_cast<size_t>(j)] += r * x_.data_as<float>()[s * inputs + j];
			}
			const auto put = [&](float& g, double v) {
				const auto scaled = static_cast<float>(v * options.loss_scale);
				g = options.accumulate ? g + scaled : scaled;
			};
			put(gb[k], db);
			for (int j = 0; j < inputs; ++j)
				put(gw[k * inputs + j], dw[static_cast<size_t>(j)]);
		}
		if (on_ready) {
			on_ready(b_);
			on_ready(w_);
		}
	}

private:
	Device cpu_;
	Parameter w_, b_;
	Tensor x_;
	std::vector<float> residual_;
};

// Keeps the summary rank 0's observer is given.
struct KeepSummary : TrainingObserver {
	void finished(const nlohmann::json& s) override { summary = s; }
	nlohmann::json summary;
};

// The run's summary on rank 0 (null elsewhere) and its result.
std::pair<nlohmann::json, RunResult> train(const Topology& topology, const std::string& strategy, std::vector<float>* weights)
{
	static const Regression train_set(480, 0), test_set(96, 10000);
	LinearRegression model;
	TrainerConfig c;
	c.strategy.name = strategy;
	c.optimizer.name = "sgd";
	c.schedule.base_lr = 0.2f;
	c.batch = 24 / topology.size(); // the same global batch at 1, 2, 3 and 4 ranks
	c.epochs = 3;
	c.log_every = 1000;
	KeepSummary kept;
	Trainer trainer(topology, Device{}, model, train_set, test_set, c, &kept);
	const RunResult result = trainer.run();
	*weights = model.parameters()[0]->value.to_host_f32();
	return {kept.summary, result};
}

} // namespace

TEST_CASE("a model of named vectors with a loss of its own trains through the trainer, N ranks as 1")
{
	const Topology topology(world().comm(), std::nullopt);
	const Topology alone(MPI_COMM_SELF, std::nullopt);
	std::vector<float> one, many;
	const RunResult single = train(alone, "replicated", &one).second;
	for (const std::string strategy : {"replicated", "parameter-server"}) {
		CAPTURE(strategy);
		const auto [summary, result] = train(topology, strategy, &many);
		REQUIRE(one.size() == many.size());
		double worst = 0;
		for (size_t i = 0; i < one.size(); ++i)
			worst = std::max(worst, static_cast<double>(std::abs(one[i] - many[i])));
		CHECK(worst < 1e-6);
		// Evaluation reports what the model defines: no accuracy, a loss and its perplexity.
		CHECK(!result.test_accuracy.has_value());
		REQUIRE(result.test_loss.has_value());
		CHECK(*result.test_loss < 0.01);
		CHECK(summary.is_null() == (world().rank() != 0));
		if (world().rank() == 0)
			CHECK(summary.at("test_perplexity").get<double>() == doctest::Approx(std::exp(*result.test_loss)));
	}
	// It learned: the targets are a linear function of x, so the loss goes far below the start's.
	REQUIRE(single.test_loss.has_value());
	CHECK(*single.test_loss < 0.01);
}

TEST_CASE("a model that reads a tensor the samples do not have is told which ones they have")
{
	const Regression set(8, 0);
	SampleBatcher batcher(set, 4, Device{});
	const std::vector<int64_t> first = {0, 1, 2, 3};
	const Batch& b = batcher.assemble(first);
	CHECK(b.samples() == 4);
	CHECK(b.get("x").shape() == Shape{4, inputs});
	CHECK_THROWS_WITH_AS(b.get("images"), doctest::Contains("no tensor 'images' (it holds: x, target)"), Error);
}
