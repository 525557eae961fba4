// GPU test: f16/bf16 layers and models on CUDA against the f32 CPU path, overflow, loss scaling,
// and the gradient-hygiene ops against the CPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "models/init.h"
#include "models/layers/conv2d.h"
#include "models/layers/linear.h"
#include "models/layers/maxpool2d.h"
#include "models/model_factory.h"
#include "models/kernels/ops.h"
#include "base/device/device.h"
#include "test/gpu/gpu_device.h"
#include "test/harness/mpi_main.h"
#include "test/models/precision_checks.h"

using namespace tower;
using tower::test::check_close;
using tower::test::precision_tolerance;
using tower::test::gpu;

namespace {

Tensor random_input(const Shape& shape)
{
	return Tensor::from_host(seeded_uniform("x", 3, shape_numel(shape), 1.0f), shape, Device{});
}

// Exact in both 16-bit types, distinct in every 2x2 window, never zero.
Tensor exact_input(const Shape& shape)
{
	std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
	for (size_t i = 0; i < v.size(); ++i)
		v[i] = static_cast<float>(static_cast<int64_t>(i * 37 % 211) - 105) / 64.0f + 1.0f / 128.0f;
	return Tensor::from_host(v, shape, Device{});
}

Tensor on(const Device& d, const Tensor& host, DType t)
{
	Tensor staged = Tensor::empty(host.shape(), host.dtype(), d);
	staged.copy_from(host);
	if (t == host.dtype())
		return staged;
	Tensor out = Tensor::empty(host.shape(), t, d);
	ops_for(d).cast(staged, out, false);
	return out;
}

using LayerMaker = std::function<std::unique_ptr<Layer>(const Device&)>;

// The f32 layer on the CPU against the same layer in `t` on the GPU.
void compare_layer(const LayerMaker& make, const Tensor& x, DType t)
{
	const Device g = gpu();
	auto ref = make(Device{});
	auto low = make(g);
	const Tensor& y_ref = ref->forward(x);
	const Tensor& y_low = low->forward(on(g, x, t));
	check_close(y_ref, y_low, precision_tolerance(t), "output");
	const Tensor dy = Tensor::from_host(seeded_uniform("dy", 4, y_ref.numel(), 1.0f), y_ref.shape(), Device{});
	const Tensor dy_low = on(g, dy, t);
	for (bool accumulate : {false, true}) {
		const BackwardArgs args{true, accumulate, nullptr};
		const Tensor dx_ref = ref->backward(dy, args);
		const Tensor dx_low = low->backward(dy_low, args);
		check_close(dx_ref, dx_low, precision_tolerance(t), "input gradient");
		const auto pr = ref->parameters(), pl = low->parameters();
		for (size_t i = 0; i < pr.size(); ++i)
			check_close(pr[i]->grad, pl[i]->grad, precision_tolerance(t), pr[i]->name);
	}
}

// Bounds for whole models on the GPU against f32 on the CPU, per type (relative L2, see
// precision_checks.h). The GPU rounds at other points than the CPU's 16-bit path (cublasGemmEx
// rounds each f32-accumulated output once; the CPU rounds its blocked partial sums), so which
// max-pool windows end in a 16-bit tie is another draw, not the CPU test batch's:
// - convolutions behind pooling: the CPU measured bf16 0.079 on the test batch but up to 0.155
//   over 16 batches, f16 at most 0.037; the GPU gets bf16 0.2 and f16 0.05 (about 1.3x the
//   worst seen). Not yet measured on a GPU: docs/gpu-validation.md records the first run. The
//   weight gradient's sum over the batch is not part of this bound: the default convolution
//   keeps it in f32 and rounds once, which the last test case checks on the GPU within two bf16
//   roundings (before, the bf16 running sum was 15% off at batch 256).
// - the CNN's fully connected layers take pooled activations that went through two convolutions
//   and two poolings in 16 bits, each rounding at 2^-9 (bf16) or 2^-12 (f16) relative, so their
//   gradients get three times the per-layer bound: bf16 3e-2, f16 6e-3.
// - everything else (the MLP): the per-layer bound, bf16 1e-2 and f16 2e-3.
// These bounds hold for the CPU test's batch of images. This test's batch is uniform noise with
// labels unrelated to it, so a weight gradient, a sum over 32 samples, cancels to a fraction of
// its terms and their rounding weighs more: on an H100 the MLP's bf16 gradients came out 3-6% off
// (fc1 0.058), the CNN's f16 fc1 0.020. The same 16-bit model on the CPU, on the same batch, shows
// how much this batch amplifies rounding; the GPU may be off by twice that, or by the bound.
double gpu_model_tolerance(const std::string& model, const std::string& parameter, DType t)
{
	if (model != "cnn")
		return precision_tolerance(t);
	if (parameter.starts_with("conv"))
		return t == DType::bf16 ? 0.2 : 0.05;
	return 3 * precision_tolerance(t);
}

} // namespace

TEST_CASE("f16 and bf16 layers on the GPU agree with f32 on the CPU")
{
	for (DType t : {DType::f16, DType::bf16}) {
		CAPTURE(dtype_name(t));
		for (Activation a : {Activation::none, Activation::relu})
			compare_layer([a](const Device& d) { return std::make_unique<Linear>("fc", 37, 19, a, 1, d); },
				      random_input({13, 37}), t);
		compare_layer([](const Device& d) {
			return std::make_unique<Conv2d>("conv", Conv2dShape{3, 8, 5, 2}, Activation::none, 1, d);
		}, random_input({4, 3, 12, 11}), t);
		compare_layer([](const Device&) { return std::make_unique<MaxPool2d>(); }, exact_input({3, 4, 9, 8}), t);
	}
}

TEST_CASE("both models in f16 and bf16 on the GPU agree with f32 on the CPU; f16 overflows, bf16 does not")
{
	const Device g = gpu();
	const int64_t batch = 32;
	const Tensor images = Tensor::from_host(seeded_uniform("img", 5, batch * 784, 1.0f), {batch, 1, 28, 28}, Device{});
	Tensor labels = Tensor::empty({batch}, DType::i32, Device{});
	for (int64_t i = 0; i < batch; ++i)
		labels.data_as<int32_t>()[i] = static_cast<int32_t>(i % 10);
	for (const std::string name : {"mlp", "cnn"})
		for (DType t : {DType::f16, DType::bf16}) {
			CAPTURE(name);
			CAPTURE(dtype_name(t));
			auto ref = make_model(ModelConfig{name, 64, 2, 9}, Device{});
			ModelConfig c{name, 64, 2, 9};
			c.precision = t;
			auto low = make_model(c, g);
			auto low_cpu = make_model(c, Device{});
			const ForwardResult rr = ref->forward(images, labels);
			const ForwardResult rl = low->forward(on(g, images, DType::f32), on(g, labels, DType::i32));
			low_cpu->forward(images, labels);
			CHECK(rl.loss == doctest::Approx(rr.loss).epsilon(precision_tolerance(t)));
			ref->backward({}, BackwardOptions{});
			low->backward({}, BackwardOptions{false, 8.0f});
			low_cpu->backward({}, BackwardOptions{false, 8.0f});
			const auto pr = ref->parameters(), pl = low->parameters(), pc = low_cpu->parameters();
			for (size_t i = 0; i < pr.size(); ++i) {
				scale(pl[i]->grad, 1.0f / 8.0f);
				scale(pc[i]->grad, 1.0f / 8.0f);
				const double cpu_error = test::relative_l2(pr[i]->grad, pc[i]->grad);
				const double gpu_error = test::relative_l2(pr[i]->grad, pl[i]->grad);
				MESSAGE(name, " ", dtype_name(t), " ", pr[i]->name, ": relative L2 error GPU ", gpu_error,
					", CPU ", cpu_error);
				const double bound = std::max(gpu_model_tolerance(name, pr[i]->name, t), 2 * cpu_error);
				check_close(pr[i]->grad, pl[i]->grad, bound, pr[i]->name);
			}
			low->backward({}, BackwardOptions{false, 16777216.0f});
			bool finite = true;
			for (Parameter* p : pl)
				finite = finite && all_finite(p->grad);
			CHECK(finite == (t == DType::bf16));
		}
}

TEST_CASE("the hygiene ops on the GPU match the CPU")
{
	const Device g = gpu();
	for (int64_t n : {1, 1000, 1 << 20}) {
		CAPTURE(n);
		const Tensor host = Tensor::from_host(seeded_uniform("g", 1, n, 2.0f), {n}, Device{});
		const Tensor dev = on(g, host, DType::f32);
		CHECK(all_finite(dev));
		CHECK(sum_of_squares(dev) == doctest::Approx(sum_of_squares(host)).epsilon(1e-12));
		std::vector<float> v = host.to_host_f32();
		v[static_cast<size_t>(n - 1)] = std::numeric_limits<float>::infinity();
		CHECK_FALSE(all_finite(on(g, Tensor::from_host(v, {n}, Device{}), DType::f32)));
		v[0] = std::numeric_limits<float>::quiet_NaN();
		CHECK_FALSE(all_finite(on(g, Tensor::from_host(v, {n}, Device{}), DType::f32)));
		scale(dev, 0.5f);
		scale(host, 0.5f);
		CHECK(dev.to_host_f32() == host.to_host_f32());
	}
}

// The 16-bit path of the model test above cannot see how the weight gradient's sum over a batch is
// rounded (its bound covers max-pool ties): here the same bf16 inputs go through the GPU's
// convolution in bf16 and in f32. Summed image by image into bf16, the sum was 15% off at batch
// 256; rounded once, it is within two bf16 roundings.
TEST_CASE("the GPU's bf16 convolution weight gradient over a batch of 256 is rounded once")
{
	const Device g = gpu();
	const Ops& ops = ops_for(g);
	const ConvGeometry geo{2, 6, 6, 3, 1};
	const int64_t batch = 256, oc = 3;
	// Positive terms, so the sum grows with the batch and a 16-bit running sum's rounding shows.
	auto positive = [&](const Shape& shape, const char* name) {
		std::vector<float> v = seeded_uniform(name, 7, shape_numel(shape), 1.0f);
		for (float& e : v)
			e = 0.5f + std::abs(e);
		return on(g, Tensor::from_host(v, shape, Device{}), DType::bf16);
	};
	const Tensor x16 = positive({batch, geo.channels, geo.height, geo.width}, "x");
	const Tensor dy16 = positive({batch, oc, geo.out_height(), geo.out_width()}, "dy");
	const Tensor x32 = Tensor::empty(x16.shape(), DType::f32, g), dy32 = Tensor::empty(dy16.shape(), DType::f32, g);
	ops.cast(x16, x32, false);
	ops.cast(dy16, dy32, false);
	const Shape w_shape = {oc, geo.channels, geo.kernel, geo.kernel};
	auto workspace = [&](int64_t images, DType t) {
		return Tensor::empty({images * conv_workspace_per_image(geo, oc)}, t, g);
	};
	const Tensor want = Tensor::zeros(w_shape, DType::f32, g);
	ops.conv2d_backward_weights(geo, x32, dy32, want, false, workspace(batch, DType::f32));
	for (int64_t per_pass : {batch, int64_t{100}, int64_t{1}}) {
		CAPTURE(per_pass);
		const Tensor got = Tensor::zeros(w_shape, DType::bf16, g);
		ops.conv2d_backward_weights(geo, x16, dy16, got, false, workspace(per_pass, DType::bf16));
		const std::vector<float> a = got.to_host_f32(), b = want.to_host_f32();
		double worst = 0;
		for (size_t i = 0; i < a.size(); ++i)
			worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::abs(static_cast<double>(b[i])));
		CAPTURE(worst);
		CHECK(worst <= 2.0 / 256);
	}
}
