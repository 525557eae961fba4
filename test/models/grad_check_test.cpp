// Gradient checks: each layer's hand-written backward against float64 finite differences.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "models/init.h"
#include "models/layers/conv2d.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"
#include "models/layers/maxpool2d.h"
#include "models/layers/relu.h"
#include "models/sequential.h"
#include "test/harness/mpi_main.h"
#include "test/models/reference.h"

using namespace tower;
using namespace tower::test;

namespace {

enum class Kind { linear, conv, relu, pool, flatten };

struct LayerSpec {
	Kind kind;
	int64_t in = 0;
	int64_t out = 0;
	int64_t kernel = 0;
	int64_t padding = 0;
	bool fused_relu = false;
};

struct Net {
	std::vector<LayerSpec> layers;
	Shape input; // [B, C, H, W]
	int64_t classes = 0;
};

std::unique_ptr<SequentialModel> build(const Net& net, uint64_t seed)
{
	std::vector<std::unique_ptr<Layer>> layers;
	for (size_t i = 0; i < net.layers.size(); ++i) {
		const LayerSpec& s = net.layers[i];
		const std::string name = fmt::format("l{}", i);
		const Activation act = s.fused_relu ? Activation::relu : Activation::none;
		switch (s.kind) {
		case Kind::linear: layers.push_back(std::make_unique<Linear>(name, s.in, s.out, act, seed, Device{})); break;
		case Kind::conv:
			layers.push_back(std::make_unique<Conv2d>(name, Conv2dShape{s.in, s.out, s.kernel, s.padding}, act,
								  seed, Device{}));
			break;
		case Kind::relu: layers.push_back(std::make_unique<ReLU>()); break;
		case Kind::pool: layers.push_back(std::make_unique<MaxPool2d>()); break;
		case Kind::flatten: layers.push_back(std::make_unique<Flatten>()); break;
		}
	}
	return std::make_unique<SequentialModel>(std::move(layers), Device{});
}

// The loss in float64 from the given parameter values (in parameters() order).
double reference_loss(const Net& net, const std::vector<Vec>& params, const Vec& images,
		      const std::vector<int32_t>& labels)
{
	Vec x = images;
	Shape dims = net.input;
	size_t next = 0;
	for (const LayerSpec& s : net.layers) {
		switch (s.kind) {
		case Kind::linear:
			x = ref_linear(x, params[next], params[next + 1], dims[0], s.in, s.out);
			next += 2;
			dims = {dims[0], s.out};
			break;
		case Kind::conv:
			x = ref_conv(x, params[next], params[next + 1], dims[0], s.in, dims[2], dims[3], s.out, s.kernel,
				     s.padding);
			next += 2;
			dims = {dims[0], s.out, dims[2] + 2 * s.padding - s.kernel + 1, dims[3] + 2 * s.padding - s.kernel + 1};
			break;
		case Kind::relu: break;
		case Kind::pool:
			x = ref_maxpool(x, dims[0] * dims[1], dims[2], dims[3]);
			dims = {dims[0], dims[1], dims[2] / 2, dims[3] / 2};
			break;
		case Kind::flatten: dims = {dims[0], shape_numel(dims) / dims[0]}; break;
		}
		if (s.kind == Kind::relu || s.fused_relu)
			x = ref_relu(x);
	}
	return ref_xent(x, labels, net.classes);
}

struct ImageBatch {
	Vec images;
	std::vector<int32_t> labels;
	Tensor images_t;
	Tensor labels_t;
};

ImageBatch make_batch(const Net& net, uint64_t seed)
{
	ImageBatch b;
	const std::vector<float> pixels = seeded_uniform("images", seed, shape_numel(net.input), 1.0f);
	b.images = to_double(pixels);
	b.images_t = Tensor::from_host(pixels, net.input, Device{});
	const int64_t batch = net.input[0];
	b.labels_t = Tensor::empty({batch}, DType::i32, Device{});
	for (int64_t i = 0; i < batch; ++i) {
		b.labels.push_back(static_cast<int32_t>((i * 7 + 3) % net.classes));
		b.labels_t.data_as<int32_t>()[i] = b.labels.back();
	}
	return b;
}

// Forward, backward, and every parameter gradient element against a central difference of the
// float64 reference loss.
void check_gradients(const Net& net)
{
	auto model = build(net, 42);
	const ImageBatch batch = make_batch(net, 7);
	const std::vector<Parameter*> params = model->parameters();
	std::vector<Vec> values;
	for (Parameter* p : params)
		values.push_back(to_double(p->value.to_host_f32()));

	const ForwardResult r = model->forward(batch.images_t, batch.labels_t);
	const double ref = reference_loss(net, values, batch.images, batch.labels);
	CHECK(std::abs(r.loss - ref) <= 1e-5 * (1.0 + std::abs(ref)));

	std::vector<std::string> order;
	model->backward([&](const Parameter& p) { order.push_back(p.name); }, BackwardOptions{});
	REQUIRE(order.size() == params.size());
	for (size_t i = 0; i < params.size(); ++i)
		CHECK(order[i] == params[params.size() - 1 - i]->name); // reverse registration order

	const double h = 1e-6;
	for (size_t pi = 0; pi < params.size(); ++pi) {
		const std::vector<float> grad = params[pi]->grad.to_host_f32();
		for (size_t j = 0; j < grad.size(); ++j) {
			std::vector<Vec> plus = values, minus = values;
			plus[pi][j] += h;
			minus[pi][j] -= h;
			const double fd = (reference_loss(net, plus, batch.images, batch.labels) -
					   reference_loss(net, minus, batch.images, batch.labels)) /
					  (2 * h);
			INFO(params[pi]->name, "[", j, "]: analytic ", grad[j], ", finite difference ", fd);
			CHECK(std::abs(grad[j] - fd) <= 2e-3 * std::abs(fd) + 2e-5);
		}
	}
}

const Net mlp_net{{{Kind::flatten},
		   {Kind::linear, 12, 8, 0, 0, true},
		   {Kind::linear, 8, 8, 0, 0, true},
		   {Kind::linear, 8, 5}},
		  {4, 1, 3, 4},
		  5};

const Net cnn_net{{{Kind::conv, 1, 2, 3, 1, true},
		   {Kind::pool},
		   {Kind::conv, 2, 3, 3, 1, true},
		   {Kind::pool},
		   {Kind::flatten},
		   {Kind::linear, 3, 4, 0, 0, true},
		   {Kind::linear, 4, 3}},
		  {3, 1, 6, 6},
		  3};

} // namespace

TEST_CASE("Linear with fused ReLU, Flatten and cross-entropy match finite differences")
{
	check_gradients(mlp_net);
}

TEST_CASE("a separate ReLU layer between linear layers matches finite differences")
{
	check_gradients(Net{{{Kind::flatten}, {Kind::linear, 6, 5}, {Kind::relu}, {Kind::linear, 5, 4}}, {3, 1, 2, 3}, 4});
}

TEST_CASE("Conv2d (padded, fused ReLU), MaxPool2d on odd sizes and Linear match finite differences")
{
	check_gradients(cnn_net);
}

TEST_CASE("an unpadded Conv2d on several channels with a separate ReLU matches finite differences")
{
	check_gradients(Net{{{Kind::conv, 2, 2, 3, 0}, {Kind::relu}, {Kind::pool}, {Kind::flatten},
			     {Kind::linear, 8, 3}},
			    {2, 2, 7, 7},
			    3});
}

TEST_CASE("accumulate adds into the gradients, which may be rebound to a fused buffer")
{
	auto model = build(cnn_net, 5);
	const ImageBatch batch = make_batch(cnn_net, 9);
	model->forward(batch.images_t, batch.labels_t);
	model->backward({}, BackwardOptions{});
	const std::vector<Parameter*> params = model->parameters();
	std::vector<std::vector<float>> once;
	int64_t total = 0;
	for (Parameter* p : params) {
		once.push_back(p->grad.to_host_f32());
		total += p->grad.numel();
	}
	// Rebind every gradient into one buffer, as the replicated engine does.
	Tensor fused = Tensor::zeros({total}, DType::f32, Device{});
	int64_t offset = 0;
	for (Parameter* p : params) {
		p->grad = Tensor::view(fused.data_as<float>() + offset, p->value.shape(), DType::f32, Device{});
		offset += p->value.numel();
	}
	model->backward({}, BackwardOptions{});
	model->backward({}, BackwardOptions{true});
	const std::vector<float> all = fused.to_host_f32();
	offset = 0;
	for (size_t i = 0; i < params.size(); ++i)
		for (float g : once[i]) {
			CHECK(all[static_cast<size_t>(offset)] == doctest::Approx(2.0f * g).epsilon(1e-6));
			++offset;
		}
}
