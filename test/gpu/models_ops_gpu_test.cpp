// GPU test: each layer's forward and backward, and whole models, on CUDA against the CPU backend.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "models/init.h"
#include "models/layers/conv2d.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"
#include "models/layers/maxpool2d.h"
#include "models/layers/relu.h"
#include "models/model_factory.h"
#include "models/kernels/ops.h"
#include "base/device/device.h"
#include "test/gpu/gpu_device.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::gpu;

namespace {

void check_close(const Tensor& cpu, const Tensor& cuda, const char* what)
{
	REQUIRE(cpu.shape() == cuda.shape());
	const std::vector<float> a = cpu.to_host_f32(), b = cuda.to_host_f32();
	float scale = 0.0f;
	for (float v : a)
		scale = std::max(scale, std::abs(v));
	for (size_t i = 0; i < a.size(); ++i) {
		INFO(what, "[", i, "]: cpu ", a[i], ", cuda ", b[i]);
		CHECK(std::abs(a[i] - b[i]) <= 1e-4f * (std::abs(a[i]) + scale) + 1e-6f);
	}
}

Tensor on(const Device& d, const Tensor& host)
{
	Tensor t = Tensor::empty(host.shape(), host.dtype(), d);
	t.copy_from(host);
	return t;
}

using LayerMaker = std::function<std::unique_ptr<Layer>(const Device&)>;

// Same layer (same seed) on both devices: forward, then backward of a fixed dy, twice with the
// second accumulating.
void compare_layer(const LayerMaker& make, const Shape& input)
{
	const Device g = gpu();
	auto cpu = make(Device{});
	auto cuda = make(g);
	const Tensor x = Tensor::from_host(seeded_uniform("x", 3, shape_numel(input), 1.0f), input, Device{});
	const Tensor& y_cpu = cpu->forward(x);
	const Tensor& y_cuda = cuda->forward(on(g, x));
	check_close(y_cpu, y_cuda, "output");
	const Tensor dy = Tensor::from_host(seeded_uniform("dy", 4, y_cpu.numel(), 1.0f), y_cpu.shape(), Device{});
	const Tensor dy_cuda = on(g, dy);
	for (bool accumulate : {false, true}) {
		const BackwardArgs args{true, accumulate, nullptr};
		const Tensor dx_cpu = cpu->backward(dy, args);
		const Tensor dx_cuda = cuda->backward(dy_cuda, args);
		check_close(dx_cpu, dx_cuda, "input gradient");
		const auto pc = cpu->parameters(), pg = cuda->parameters();
		for (size_t i = 0; i < pc.size(); ++i)
			check_close(pc[i]->grad, pg[i]->grad, pc[i]->name.c_str());
	}
}

} // namespace

TEST_CASE("Linear with and without fused ReLU")
{
	for (Activation a : {Activation::none, Activation::relu})
		compare_layer([a](const Device& d) { return std::make_unique<Linear>("fc", 37, 19, a, 1, d); }, {13, 37});
}

TEST_CASE("Conv2d with padding 2 and 0")
{
	for (int64_t pad : {2, 0})
		compare_layer([pad](const Device& d) {
			return std::make_unique<Conv2d>("conv", Conv2dShape{3, 8, 5, pad}, Activation::relu, 1, d);
		}, {4, 3, 12, 11});
}

// Conv2d gives the GPU a workspace for the whole batch: one pass. Passes of 2 images over a batch
// of 5 (the last one short) against oneDNN's convolution on the CPU.
TEST_CASE("the default convolution in several passes matches the CPU's")
{
	const Device g = gpu();
	const Ops& cuda = ops_for(g);
	const Ops& cpu = ops_for(Device{});
	const ConvGeometry geo{3, 9, 8, 3, 1};
	const int64_t batch = 5, oc = 4;
	auto host = [](const Shape& shape, const char* name) {
		return Tensor::from_host(seeded_uniform(name, 11, shape_numel(shape), 1.0f), shape, Device{});
	};
	const Tensor x = host({batch, geo.channels, geo.height, geo.width}, "x");
	const Tensor w = host({oc, geo.channels, geo.kernel, geo.kernel}, "w");
	const Tensor dy = host({batch, oc, geo.out_height(), geo.out_width()}, "dy");
	const Tensor workspace = Tensor::empty({2 * conv_workspace_per_image(geo, oc)}, DType::f32, g);
	const Tensor y = Tensor::zeros(dy.shape(), DType::f32, Device{}), y_gpu = Tensor::zeros(dy.shape(), DType::f32, g);
	cpu.conv2d_forward(geo, x, w, y, Tensor());
	cuda.conv2d_forward(geo, on(g, x), on(g, w), y_gpu, workspace);
	check_close(y, y_gpu, "forward");
	const Tensor dx = Tensor::zeros(x.shape(), DType::f32, Device{}), dx_gpu = Tensor::zeros(x.shape(), DType::f32, g);
	cpu.conv2d_backward_data(geo, w, dy, dx, Tensor());
	cuda.conv2d_backward_data(geo, on(g, w), on(g, dy), dx_gpu, workspace);
	check_close(dx, dx_gpu, "input gradient");
	const Tensor dw = Tensor::zeros(w.shape(), DType::f32, Device{}), dw_gpu = Tensor::zeros(w.shape(), DType::f32, g);
	cpu.conv2d_backward_weights(geo, x, dy, dw, false, Tensor());
	cuda.conv2d_backward_weights(geo, on(g, x), on(g, dy), dw_gpu, false, workspace);
	check_close(dw, dw_gpu, "weight gradient");
}

TEST_CASE("MaxPool2d, ReLU and Flatten")
{
	compare_layer([](const Device&) { return std::make_unique<MaxPool2d>(); }, {3, 4, 9, 8});
	compare_layer([](const Device&) { return std::make_unique<ReLU>(); }, {5, 7});
	compare_layer([](const Device&) { return std::make_unique<Flatten>(); }, {2, 3, 4, 5});
}

// Multiples of 2^-bits. Sums of products of such values are exact in f32 while they stay small, so
// both devices compute the same convolution outputs bit for bit, whatever their order of summation.
std::vector<float> on_grid(std::vector<float> values, int bits)
{
	for (float& v : values)
		v = std::ldexp(std::round(std::ldexp(v, bits)), -bits);
	return values;
}

// The CNN's gradients reach its convolutions through max pooling, which sends each window's
// gradient to its largest input. Two inputs within rounding of each other can come out in either
// order on the two devices, and the gradient then lands on another element; on an H100 one such
// window in 100,000 moved conv2's weight gradient of one channel and all of conv1's by up to 10%.
// With images and convolution parameters on a grid, the convolutions are exact on both devices, so
// every window picks the same element and the comparison sees the kernels alone.
void put_convolutions_on_grid(Model& cpu, Model& cuda)
{
	const auto pc = cpu.parameters(), pg = cuda.parameters();
	for (size_t i = 0; i < pc.size(); ++i) {
		if (!pc[i]->name.starts_with("conv"))
			continue;
		Tensor& value = pc[i]->value;
		value.copy_from(Tensor::from_host(on_grid(value.to_host_f32(), 8), value.shape(), Device{}));
		pg[i]->value.copy_from(value);
	}
}

TEST_CASE("the mlp and the cnn give the same loss, correct count and gradients on both devices")
{
	const Device g = gpu();
	const int64_t batch = 32;
	const Tensor images =
		Tensor::from_host(on_grid(seeded_uniform("img", 5, batch * 784, 1.0f), 3), {batch, 1, 28, 28}, Device{});
	Tensor labels = Tensor::empty({batch}, DType::i32, Device{});
	for (int64_t i = 0; i < batch; ++i)
		labels.data_as<int32_t>()[i] = static_cast<int32_t>(i % 10);
	for (const std::string name : {"mlp", "cnn"}) {
		CAPTURE(name);
		auto cpu = make_model(ModelConfig{name, 0, 2, 9}, Device{});
		auto cuda = make_model(ModelConfig{name, 0, 2, 9}, g);
		put_convolutions_on_grid(*cpu, *cuda);
		const ForwardResult rc = cpu->forward(images, labels);
		const ForwardResult rg = cuda->forward(on(g, images), on(g, labels));
		CHECK(rg.loss == doctest::Approx(rc.loss).epsilon(1e-4));
		CHECK(rg.correct == rc.correct);
		cpu->backward({}, BackwardOptions{});
		cuda->backward({}, BackwardOptions{});
		const auto pc = cpu->parameters(), pg = cuda->parameters();
		for (size_t i = 0; i < pc.size(); ++i) {
			check_close(pc[i]->value, pg[i]->value, pc[i]->name.c_str());
			check_close(pc[i]->grad, pg[i]->grad, pc[i]->name.c_str());
		}
	}
}

// The kernel only ever sets the bad-label flag; were it not cleared before each forward, every
// batch after one bad label would be refused too.
TEST_CASE("a bad label fails its own forward only")
{
	const Device g = gpu();
	const Ops& ops = ops_for(g);
	const int64_t rows = 4, classes = 10;
	const Tensor logits = on(g, Tensor::from_host(std::vector<float>(rows * classes, 0.5f), {rows, classes}, Device{}));
	const Tensor probs = Tensor::empty({rows, classes}, DType::f32, g);
	auto labels_of = [&](std::vector<int32_t> values) {
		Tensor host = Tensor::empty({rows}, DType::i32, Device{});
		std::copy(values.begin(), values.end(), host.data_as<int32_t>());
		return on(g, host);
	};
	const Tensor good = labels_of({0, 3, 9, 1}), bad = labels_of({0, 10, 2, 1});
	CHECK_NOTHROW(ops.softmax_xent_forward(logits, good, probs));
	CHECK_THROWS_WITH(ops.softmax_xent_forward(logits, bad, probs), doctest::Contains("outside [0, 10)"));
	XentResult after{};
	CHECK_NOTHROW(after = ops.softmax_xent_forward(logits, good, probs));
	CHECK(after.loss == doctest::Approx(std::log(10.0)).epsilon(1e-5));
}
