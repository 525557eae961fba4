// Mixed precision: every layer and both models in f16 and bf16 against the f32 path, overflow,
// loss scaling, and training in 16 bits.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "runtime/options/run_fields.h"
#include "base/tensor/half.h"
#include "models/init.h"
#include "models/layers/conv2d.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"
#include "models/layers/maxpool2d.h"
#include "models/layers/relu.h"
#include "models/model_factory.h"
#include "models/kernels/ops.h"
#include "base/error.h"
#include "test/harness/mpi_main.h"
#include "test/models/precision_checks.h"

using namespace tower;
using tower::test::check_close;
using tower::test::precision_tolerance;

namespace {

Tensor to_type(const Tensor& f32, DType t)
{
	Tensor out = Tensor::empty(f32.shape(), t, f32.device());
	cpu_ops().cast(f32, out, false);
	return out;
}

using LayerMaker = std::function<std::unique_ptr<Layer>()>;

Tensor random_input(const Shape& shape)
{
	return Tensor::from_host(seeded_uniform("x", 3, shape_numel(shape), 1.0f), shape, Device{});
}

// Inputs exact in both 16-bit types (multiples of 1/64 below 2), all distinct within any 2x2
// window and none zero, so ReLU and max pooling make the same choices as in f32.
Tensor exact_input(const Shape& shape)
{
	std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
	for (size_t i = 0; i < v.size(); ++i)
		v[i] = static_cast<float>(static_cast<int64_t>(i * 37 % 211) - 105) / 64.0f + 1.0f / 128.0f;
	return Tensor::from_host(v, shape, Device{});
}

// The same layer (same seed) in f32 and in `t`: forward, then backward of one dy twice, the
// second accumulating; outputs, input gradients and the f32 parameter gradients must agree.
void compare_layer(const LayerMaker& make, const Tensor& x, DType t)
{
	auto ref = make();
	auto low = make();
	const Tensor& y_ref = ref->forward(x);
	const Tensor& y_low = low->forward(to_type(x, t));
	CHECK(y_low.dtype() == t);
	check_close(y_ref, y_low, precision_tolerance(t), "output");
	const Tensor dy = Tensor::from_host(seeded_uniform("dy", 4, y_ref.numel(), 1.0f), y_ref.shape(), Device{});
	const Tensor dy_low = to_type(dy, t);
	for (bool accumulate : {false, true}) {
		CAPTURE(accumulate);
		const BackwardArgs args{true, accumulate, nullptr};
		const Tensor dx_ref = ref->backward(dy, args);
		const Tensor dx_low = low->backward(dy_low, args);
		CHECK(dx_low.dtype() == t);
		check_close(dx_ref, dx_low, precision_tolerance(t), "input gradient");
		const auto pr = ref->parameters(), pl = low->parameters();
		for (size_t i = 0; i < pr.size(); ++i) {
			CHECK(pl[i]->grad.dtype() == DType::f32);
			check_close(pr[i]->grad, pl[i]->grad, precision_tolerance(t), pr[i]->name);
		}
	}
}

struct ImageBatch {
	Tensor images;
	Tensor labels;
};

ImageBatch make_batch(int64_t size, uint64_t seed)
{
	std::vector<float> pixels = seeded_uniform("pixels", seed, size * 784, 0.5f);
	for (float& v : pixels)
		v += 0.5f;
	ImageBatch b{Tensor::from_host(pixels, {size, 1, 28, 28}, Device{}), Tensor::empty({size}, DType::i32, Device{})};
	for (int64_t i = 0; i < size; ++i)
		b.labels.data_as<int32_t>()[i] = static_cast<int32_t>((i * 3 + seed) % 10);
	return b;
}

ModelConfig config(const std::string& name, DType precision)
{
	ModelConfig c{name, 32, 2, 5};
	c.precision = precision;
	return c;
}

bool grads_finite(Model& m)
{
	bool ok = true;
	for (Parameter* p : m.parameters())
		ok = ok && all_finite(p->grad);
	return ok;
}

} // namespace

TEST_CASE("casts round to nearest even as half.h does, and f16 overflows to inf where bf16 does not")
{
	const std::vector<float> values = {0.1f, -3.14159f, 65504.0f, 70000.0f, 1e-6f, 3e38f, -1e5f, 1.0f / 3.0f};
	const Tensor x = Tensor::from_host(values, {8}, Device{});
	const std::vector<float> h = to_type(x, DType::f16).to_host_f32();
	const std::vector<float> b = to_type(x, DType::bf16).to_host_f32();
	for (size_t i = 0; i < values.size(); ++i) {
		CHECK(h[i] == f16_to_f32(f32_to_f16(values[i])));
		CHECK(b[i] == bf16_to_f32(f32_to_bf16(values[i])));
		CHECK(std::isfinite(b[i]));
	}
	CHECK(std::isinf(h[3]));
	CHECK(std::isinf(h[5]));
	// Accumulating cast: f32 += widened 16-bit values.
	const Tensor acc = Tensor::from_host(std::vector<float>(8, 1.0f), {8}, Device{});
	cpu_ops().cast(to_type(x, DType::bf16), acc, true);
	const std::vector<float> got = acc.to_host_f32();
	for (size_t i = 0; i < values.size(); ++i)
		CHECK(got[i] == 1.0f + b[i]);
}

TEST_CASE("a 16-bit gemm accumulates in f32 and rounds once; an f16 result past 65504 is inf")
{
	// 256 products of 1 * (1 + 2^-8): in f16 each partial sum would round, in f32 none does.
	const Tensor a = to_type(Tensor::from_host(std::vector<float>(256, 1.0f), {1, 256}, Device{}), DType::f16);
	const Tensor b = to_type(Tensor::from_host(std::vector<float>(256, 1.0f + 1.0f / 256), {256, 1}, Device{}),
				 DType::f16);
	const Tensor c = Tensor::zeros({1, 1}, DType::f16, Device{});
	cpu_ops().gemm(Transpose::no, Transpose::no, 1.0f, a, b, 0.0f, c);
	CHECK(c.to_host_f32()[0] == 257.0f);
	cpu_ops().gemm(Transpose::no, Transpose::no, 300.0f, a, b, 0.0f, c);
	CHECK(std::isinf(c.to_host_f32()[0]));
	const Tensor cb = Tensor::zeros({1, 1}, DType::bf16, Device{});
	cpu_ops().gemm(Transpose::no, Transpose::no, 300.0f, to_type(Tensor::from_host(std::vector<float>(256, 1.0f),
			{1, 256}, Device{}), DType::bf16), to_type(Tensor::from_host(std::vector<float>(256, 1.0f), {256, 1},
			Device{}), DType::bf16), 0.0f, cb);
	CHECK(cb.to_host_f32()[0] == 76800.0f);
}

TEST_CASE("every layer in f16 and bf16 agrees with f32")
{
	for (DType t : {DType::f16, DType::bf16}) {
		CAPTURE(dtype_name(t));
		for (Activation a : {Activation::none, Activation::relu})
			compare_layer([a] { return std::make_unique<Linear>("fc", 37, 19, a, 1, Device{}); },
				      random_input({13, 37}), t);
		// Without the fused ReLU: an output within rounding of zero would switch its gradient on or
		// off (the fused path is covered by Linear above and by the models).
		for (int64_t pad : {2, 0})
			compare_layer([pad] {
				return std::make_unique<Conv2d>("conv", Conv2dShape{3, 8, 5, pad}, Activation::none, 1,
								Device{});
			}, random_input({4, 3, 12, 11}), t);
		compare_layer([] { return std::make_unique<MaxPool2d>(); }, exact_input({3, 4, 9, 8}), t);
		compare_layer([] { return std::make_unique<ReLU>(); }, exact_input({5, 7}), t);
		compare_layer([] { return std::make_unique<Flatten>(); }, random_input({2, 3, 4, 5}), t);
	}
}

TEST_CASE("both models in f16 and bf16 give the f32 loss and gradients within the type's tolerance")
{
	const ImageBatch batch = make_batch(8, 1);
	for (const std::string name : {"mlp", "cnn"})
		for (DType t : {DType::f16, DType::bf16}) {
			CAPTURE(name);
			CAPTURE(dtype_name(t));
			auto ref = make_model(config(name, DType::f32), Device{});
			auto low = make_model(config(name, t), Device{});
			const ForwardResult rr = ref->forward(batch.images, batch.labels);
			const ForwardResult rl = low->forward(batch.images, batch.labels);
			CHECK(rl.loss == doctest::Approx(rr.loss).epsilon(precision_tolerance(t)));
			ref->backward({}, BackwardOptions{});
			low->backward({}, BackwardOptions{});
			const auto pr = ref->parameters(), pl = low->parameters();
			for (size_t i = 0; i < pr.size(); ++i) {
				CHECK(pl[i]->value.dtype() == DType::f32);
				CHECK(pl[i]->grad.dtype() == DType::f32);
				// Gradients that flow back through max pooling go to a window's largest input;
				// two inputs that differ by less than the rounding (1 in 2^8 for bf16, 2^11 for
				// f16) tie, and the gradient moves to the first. Those switches are genuine 16-bit
				// behaviour and cost the convolutions a few percent, so they get a wider bound.
				const bool behind_pooling = pr[i]->name.starts_with("conv");
				check_close(pr[i]->grad, pl[i]->grad,
					    behind_pooling ? test::pooled_conv_tolerance(t) : precision_tolerance(t), pr[i]->name);
			}
		}
}

TEST_CASE("a loss scale of s gives s times the f32 gradients")
{
	const ImageBatch batch = make_batch(8, 2);
	// Powers of two scale exactly in f32 and bf16 (no subnormals are reached), so the gradients
	// must match bit for bit.
	for (DType t : {DType::f32, DType::bf16}) {
		CAPTURE(dtype_name(t));
		const float s = 1024.0f;
		auto m = make_model(config("mlp", t), Device{});
		m->forward(batch.images, batch.labels);
		m->backward({}, BackwardOptions{});
		std::vector<std::vector<float>> plain;
		for (Parameter* p : m->parameters())
			plain.push_back(p->grad.to_host_f32());
		m->backward({}, BackwardOptions{false, s});
		const auto ps = m->parameters();
		for (size_t i = 0; i < ps.size(); ++i) {
			const std::vector<float> scaled = ps[i]->grad.to_host_f32();
			size_t wrong = 0;
			for (size_t j = 0; j < scaled.size(); ++j)
				wrong += scaled[j] == s * plain[i][j] ? 0 : 1;
			INFO(ps[i]->name);
			CHECK(wrong == 0);
		}
	}
	// A non-power-of-two scale in f32: equal within rounding.
	auto m = make_model(config("cnn", DType::f32), Device{});
	m->forward(batch.images, batch.labels);
	m->backward({}, BackwardOptions{});
	const Tensor plain = m->parameters()[0]->grad.clone();
	m->backward({}, BackwardOptions{false, 3.0f});
	scale(plain, 3.0f);
	check_close(plain, m->parameters()[0]->grad, 1e-5, "conv1.weight x3");
}

TEST_CASE("accumulating backward adds the scaled 16-bit gradients into the f32 ones")
{
	const ImageBatch batch = make_batch(8, 3);
	auto m = make_model(config("mlp", DType::f16), Device{});
	m->forward(batch.images, batch.labels);
	m->backward({}, BackwardOptions{false, 2.0f});
	const Tensor once = m->parameters()[0]->grad.clone();
	m->backward({}, BackwardOptions{true, 2.0f});
	scale(once, 2.0f); // x + x is exact
	check_close(once, m->parameters()[0]->grad, 0.0, "fc1.weight accumulated");
}

TEST_CASE("a huge loss scale overflows f16 into inf gradients but not bf16")
{
	const ImageBatch batch = make_batch(8, 4);
	for (const std::string name : {"mlp", "cnn"}) {
		CAPTURE(name);
		auto h = make_model(config(name, DType::f16), Device{});
		auto b = make_model(config(name, DType::bf16), Device{});
		h->forward(batch.images, batch.labels);
		b->forward(batch.images, batch.labels);
		// dlogits reach about 2^24 / 8 x 0.9 > 65504.
		const BackwardOptions huge{false, 16777216.0f};
		h->backward({}, huge);
		b->backward({}, huge);
		CHECK_FALSE(grads_finite(*h));
		CHECK(grads_finite(*b));
		// The same f16 model with a modest scale is clean again.
		h->backward({}, BackwardOptions{false, 128.0f});
		CHECK(grads_finite(*h));
	}
}

TEST_CASE("a few SGD steps in f16 and bf16 lower the loss")
{
	const ImageBatch batch = make_batch(16, 2);
	for (const std::string name : {"mlp", "cnn"})
		for (DType t : {DType::f16, DType::bf16}) {
			CAPTURE(name);
			CAPTURE(dtype_name(t));
			ModelConfig c{name, 32, 1, 4}; // models_test's f32 training run
			c.precision = t;
			auto m = make_model(c, Device{});
			const float s = 256.0f; // scaled, then un-scaled in the update, as the engine does
			const float first = m->forward(batch.images, batch.labels).loss;
			// At this rate the loss overshoots at first and then falls with bumps (the CNN in f16
			// went 1.70, 1.70, 2.11 over its last steps on one CPU): the mean of the last five
			// steps is held to the mark, not a single step's.
			float recent = 0.0f;
			for (int step = 0; step < 15; ++step) {
				m->backward({}, BackwardOptions{false, s});
				for (Parameter* p : m->parameters()) {
					REQUIRE(all_finite(p->grad));
					cpu_ops().accumulate(-0.05f / s, p->grad, p->value);
				}
				const float loss = m->forward(batch.images, batch.labels).loss;
				REQUIRE(std::isfinite(loss));
				if (step >= 10)
					recent += loss / 5.0f;
			}
			CHECK(recent < 0.7f * first);
		}
}

TEST_CASE("precision names parse, and a model refuses a type that is not a compute type")
{
	CHECK(parse_precision("fp32") == DType::f32);
	CHECK(parse_precision("fp16") == DType::f16);
	CHECK(parse_precision("bf16") == DType::bf16);
	CHECK_THROWS_WITH_AS(parse_precision("fp8"), doctest::Contains("`precision` 'fp8': unknown type; give fp32, fp16 or bf16"), AgreedError);
	ModelConfig c = config("mlp", DType::i32);
	CHECK_THROWS_WITH_AS(make_model(c, Device{}), doctest::Contains("not a compute type"), AgreedError);
}
