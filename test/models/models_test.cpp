// Tests of the built-in models: names, shapes, deterministic init, batch-size changes, learning.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include <mpi.h>

#include "models/init.h"
#include "models/model_factory.h"
#include "models/kernels/ops.h"
#include "base/error.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

struct ImageBatch {
	Tensor images;
	Tensor labels;
};

ImageBatch make_batch(int64_t size, uint64_t seed)
{
	ImageBatch b;
	b.images = Tensor::from_host(seeded_uniform("pixels", seed, size * 784, 0.5f), {size, 1, 28, 28}, Device{});
	std::vector<float> shifted = b.images.to_host_f32();
	for (float& v : shifted)
		v += 0.5f; // pixels in [0, 1)
	b.images = Tensor::from_host(shifted, {size, 1, 28, 28}, Device{});
	b.labels = Tensor::empty({size}, DType::i32, Device{});
	for (int64_t i = 0; i < size; ++i)
		b.labels.data_as<int32_t>()[i] = static_cast<int32_t>((i * 3 + seed) % 10);
	return b;
}

int64_t parameter_count(Model& m)
{
	int64_t n = 0;
	for (Parameter* p : m.parameters())
		n += p->value.numel();
	return n;
}

// FNV-1a over the bits of every parameter value.
uint64_t fingerprint(Model& m)
{
	uint64_t h = 1469598103934665603ull;
	for (Parameter* p : m.parameters())
		for (float v : p->value.to_host_f32()) {
			uint32_t bits;
			std::memcpy(&bits, &v, sizeof bits);
			h = (h ^ bits) * 1099511628211ull;
		}
	return h;
}

} // namespace

TEST_CASE("the default mlp is 784-1024-1024-10 with named parameters")
{
	auto m = make_model(ModelConfig{}, Device{});
	const std::vector<Parameter*> ps = m->parameters();
	REQUIRE(ps.size() == 6);
	CHECK(ps[0]->name == "fc1.weight");
	CHECK(ps[0]->value.shape() == Shape{1024, 784});
	CHECK(ps[1]->name == "fc1.bias");
	CHECK(ps[5]->name == "fc3.bias");
	CHECK(ps[4]->value.shape() == Shape{10, 1024});
	CHECK(parameter_count(*m) == 1863690);
	for (Parameter* p : ps)
		CHECK(p->grad.shape() == p->value.shape());
}

TEST_CASE("mlp width and depth are options")
{
	auto m = make_model(ModelConfig{"mlp", 16, 3, 0}, Device{});
	const std::vector<Parameter*> ps = m->parameters();
	REQUIRE(ps.size() == 8);
	CHECK(ps[6]->name == "fc4.weight");
	CHECK(ps[6]->value.shape() == Shape{10, 16});
	CHECK_THROWS_WITH_AS(make_model(ModelConfig{"mlp", 16, 0, 0}, Device{}), doctest::Contains("depth 0"),
			     AgreedError);
}

TEST_CASE("the cnn has two conv blocks and a configurable hidden layer")
{
	auto m = make_model(ModelConfig{"cnn", 0, 2, 0}, Device{});
	const std::vector<Parameter*> ps = m->parameters();
	REQUIRE(ps.size() == 8);
	CHECK(ps[0]->name == "conv1.weight");
	CHECK(ps[0]->value.shape() == Shape{32, 1, 5, 5});
	CHECK(ps[2]->value.shape() == Shape{64, 32, 5, 5});
	CHECK(ps[4]->name == "fc1.weight");
	CHECK(ps[4]->value.shape() == Shape{512, 3136});
	CHECK(parameter_count(*m) == 1663370);
	auto small = make_model(ModelConfig{"cnn", 32, 2, 0}, Device{});
	CHECK(small->parameters()[4]->value.shape() == Shape{32, 3136});
}

TEST_CASE("an unknown model name lists the known ones")
{
	CHECK_THROWS_WITH_AS(make_model(ModelConfig{"resnet", 0, 2, 0}, Device{}),
			     doctest::Contains("unknown model 'resnet'; the known models are: mlp, cnn, gpt"), AgreedError);
}

TEST_CASE("initial parameters depend on the seed alone and agree on every rank")
{
	auto a = make_model(ModelConfig{"mlp", 64, 2, 11}, Device{});
	auto b = make_model(ModelConfig{"mlp", 64, 2, 11}, Device{});
	auto c = make_model(ModelConfig{"mlp", 64, 2, 12}, Device{});
	const uint64_t fa = fingerprint(*a);
	CHECK(fa == fingerprint(*b));
	CHECK(fa != fingerprint(*c));
	uint64_t root = fa;
	MPI_Bcast(&root, 1, MPI_UINT64_T, 0, world().comm());
	CHECK(root == fa);
	// He-uniform bounds: sqrt(6 / fan_in) for weights, 1 / sqrt(fan_in) for biases.
	for (float v : a->parameters()[0]->value.to_host_f32())
		CHECK(std::abs(v) <= std::sqrt(6.0f / 784.0f));
	for (float v : a->parameters()[1]->value.to_host_f32())
		CHECK(std::abs(v) <= 1.0f / std::sqrt(784.0f));
}

TEST_CASE("a shorter batch reuses the buffers and gives the same results as a fresh model")
{
	const ImageBatch full = make_batch(8, 1);
	const std::vector<float> pixels = full.images.to_host_f32();
	const ImageBatch part{Tensor::from_host(std::vector<float>(pixels.begin(), pixels.begin() + 4 * 784), {4, 1, 28, 28},
					   Device{}),
			 full.labels.prefix({4})};
	for (const std::string name : {"mlp", "cnn"}) {
		CAPTURE(name);
		const ModelConfig config{name, 16, 2, 3};
		auto m = make_model(config, Device{});
		const ForwardResult r8 = m->forward(full.images, full.labels);
		const ForwardResult r4 = m->forward(part.images, part.labels);
		m->backward({}, BackwardOptions{});
		auto fresh = make_model(config, Device{});
		const ForwardResult f4 = fresh->forward(part.images, part.labels);
		fresh->backward({}, BackwardOptions{});
		CHECK(r4.loss == f4.loss);
		CHECK(r4.correct == f4.correct);
		CHECK(m->parameters()[0]->grad.to_host_f32() == fresh->parameters()[0]->grad.to_host_f32());
		CHECK(m->forward(full.images, full.labels).loss == r8.loss);
	}
}

TEST_CASE("models report gradients last layer first and a few SGD steps lower the loss")
{
	for (const std::string name : {"mlp", "cnn"}) {
		CAPTURE(name);
		auto m = make_model(ModelConfig{name, 32, 1, 4}, Device{});
		const ImageBatch batch = make_batch(16, 2);
		const Ops& ops = ops_for(Device{});
		std::vector<std::string> order;
		const float first = m->forward(batch.images, batch.labels).loss;
		CHECK(std::isfinite(first));
		m->backward([&](const Parameter& p) { order.push_back(p.name); }, BackwardOptions{});
		CHECK(order.front() == "fc2.bias");
		CHECK(order.back() == (name == "mlp" ? "fc1.weight" : "conv1.weight"));
		float last = first;
		for (int step = 0; step < 15; ++step) {
			for (Parameter* p : m->parameters())
				ops.accumulate(-0.05f, p->grad, p->value);
			last = m->forward(batch.images, batch.labels).loss;
			m->backward({}, BackwardOptions{});
		}
		CHECK(last < 0.7f * first); // random guessing would not move it
	}
}

// In f32 on the CPU the GPT's GELU layers keep GELU's slope from the forward pass and write the
// gradient over it: a second backward after one forward must be refused with the reason, not run
// on the first one's gradient; after the next forward, backward gives the first gradients again.
TEST_CASE("the gpt refuses a second backward pass after one forward, naming the layer")
{
	ModelConfig config;
	config.name = "gpt";
	config.layers = 1, config.width = 32, config.heads = 2, config.context = 16;
	auto m = make_model(config, Device{});
	Tensor windows = Tensor::empty({2, config.context + 1}, DType::i32, Device{});
	for (int64_t i = 0; i < windows.numel(); ++i)
		windows.data_as<int32_t>()[i] = static_cast<int32_t>((i * 37) % 256);
	const Batch batch{{{"tokens", windows}}};
	const auto grads = [&] {
		std::vector<float> all;
		for (Parameter* p : m->parameters())
			for (float v : p->grad.to_host_f32())
				all.push_back(v);
		return all;
	};
	m->forward(batch);
	m->backward({}, BackwardOptions{});
	const std::vector<float> first = grads();
	CHECK_THROWS_WITH_AS(m->backward({}, BackwardOptions{}), doctest::Contains("h0.mlp.fc.weight: a second backward"),
			     Error);
	m->forward(batch);
	m->backward({}, BackwardOptions{});
	CHECK(grads() == first);
}
