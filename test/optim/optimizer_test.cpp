// Optimizer tests: several steps of each optimizer against a float64 reference, and their state.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "optim/optimizer.h"
#include "optim/step_counter.h"
#include "base/error.h"
#include "test/harness/mpi_main.h"

using namespace tower;

namespace {

constexpr int steps = 6;

// Two parameters of different shapes, with values and gradients that vary by element and step.
struct Fixture {
	std::vector<Parameter> storage;
	std::vector<Parameter*> parameters;

	Fixture()
	{
		storage.push_back(make("fc1.weight", {4, 9}, 0.3));
		storage.push_back(make("fc1.bias", {5}, 1.7));
		for (Parameter& p : storage)
			parameters.push_back(&p);
	}

	static Parameter make(const std::string& name, const Shape& shape, double phase)
	{
		std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
		for (size_t i = 0; i < v.size(); ++i)
			v[i] = static_cast<float>(std::cos(0.7 * static_cast<double>(i) + phase));
		return {name, Tensor::from_host(v, shape, Device{}), Tensor::zeros(shape, DType::f32, Device{}), Tensor{}};
	}

	static double gradient(size_t param, size_t i, int step)
	{
		return 0.5 * std::sin(0.37 * static_cast<double>(i) + 1.3 * step + static_cast<double>(param));
	}

	void set_gradients(int step)
	{
		for (size_t k = 0; k < storage.size(); ++k) {
			float* g = storage[k].grad.data_as<float>();
			for (size_t i = 0; i < static_cast<size_t>(storage[k].grad.numel()); ++i)
				g[i] = static_cast<float>(gradient(k, i, step));
		}
	}
};

double lr_at(int step)
{
	return 0.1 / (1.0 + step);
}

// The update rules written out in float64, one element at a time.
struct Reference {
	OptimizerConfig c;
	std::vector<std::vector<double>> p, buf, m, v;

	Reference(const OptimizerConfig& config, const Fixture& f) : c(config)
	{
		for (const Parameter& q : f.storage) {
			const auto host = q.value.to_host_f32();
			p.emplace_back(host.begin(), host.end());
			buf.emplace_back(host.size(), 0.0);
			m.emplace_back(host.size(), 0.0);
			v.emplace_back(host.size(), 0.0);
		}
	}

	void step(int s)
	{
		const double lr = lr_at(s), wd = c.weight_decay;
		const double b1 = c.beta1, b2 = c.beta2, t = s + 1;
		for (size_t k = 0; k < p.size(); ++k)
			for (size_t i = 0; i < p[k].size(); ++i) {
				double& w = p[k][i];
				double g = Fixture::gradient(k, i, s);
				if (c.name == "adamw")
					w -= lr * wd * w;
				else
					g += wd * w;
				if (c.name == "sgd") {
					w -= lr * g;
				} else if (c.name == "momentum") {
					buf[k][i] = c.momentum * buf[k][i] + g;
					w -= lr * (c.nesterov ? g + c.momentum * buf[k][i] : buf[k][i]);
				} else {
					m[k][i] = b1 * m[k][i] + (1 - b1) * g;
					v[k][i] = b2 * v[k][i] + (1 - b2) * g * g;
					const double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
					if (c.pytorch_adam) // torch.optim.Adam: epsilon after the correction
						w -= lr / c1 * m[k][i] / (std::sqrt(v[k][i]) / std::sqrt(c2) + c.epsilon);
					else
						w -= lr * std::sqrt(c2) / c1 * m[k][i] / (std::sqrt(v[k][i]) + c.epsilon);
				}
			}
	}
};

void check_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what)
{
	REQUIRE(got.size() == want.size());
	for (size_t i = 0; i < got.size(); ++i) {
		INFO(what << " element " << i);
		CHECK(std::abs(got[i] - want[i]) <= 2e-6 + 2e-6 * std::abs(want[i]));
	}
}

std::map<std::string, Tensor> by_name(const std::vector<NamedTensor>& state)
{
	std::map<std::string, Tensor> out;
	for (const NamedTensor& t : state)
		out[t.name] = t.tensor;
	return out;
}

void run_against_reference(const OptimizerConfig& config)
{
	Fixture f;
	auto opt = make_optimizer(config, f.parameters);
	Reference ref(config, f);
	for (int s = 0; s < steps; ++s) {
		f.set_gradients(s);
		opt->step(f.parameters, static_cast<float>(lr_at(s)));
		ref.step(s);
	}
	auto state = by_name(opt->state());
	CHECK(read_step_counter({"optimizer/step", state.at("optimizer/step")}) == steps);
	for (size_t k = 0; k < f.storage.size(); ++k) {
		const std::string& name = f.storage[k].name;
		check_close(f.storage[k].value.to_host_f32(), ref.p[k], name);
		if (config.name == "momentum")
			check_close(state.at(name + "/momentum").to_host_f32(), ref.buf[k], name + "/momentum");
		if (config.name == "adam" || config.name == "adamw") {
			check_close(state.at(name + "/adam_m").to_host_f32(), ref.m[k], name + "/adam_m");
			check_close(state.at(name + "/adam_v").to_host_f32(), ref.v[k], name + "/adam_v");
		}
	}
}

OptimizerConfig named(const std::string& name, float weight_decay = 0.0f)
{
	OptimizerConfig c;
	c.name = name;
	c.weight_decay = weight_decay;
	return c;
}

} // namespace

TEST_CASE("plain SGD matches the float64 reference, with and without weight decay")
{
	run_against_reference(named("sgd"));
	run_against_reference(named("sgd", 0.05f));
}

TEST_CASE("momentum matches the float64 reference, heavy-ball and Nesterov, with weight decay")
{
	OptimizerConfig c = named("momentum");
	run_against_reference(c);
	c.nesterov = true;
	run_against_reference(c);
	c.weight_decay = 0.01f;
	run_against_reference(c);
	c.momentum = 0.5f;
	run_against_reference(c);
}

TEST_CASE("Adam with bias correction matches the float64 reference, with L2 weight decay")
{
	run_against_reference(named("adam"));
	run_against_reference(named("adam", 0.1f));
	OptimizerConfig c = named("adam");
	c.beta1 = 0.5f;
	c.beta2 = 0.9f;
	c.epsilon = 1e-3f;
	run_against_reference(c);
}

TEST_CASE("AdamW decays the weights apart from the gradient and matches the float64 reference")
{
	run_against_reference(named("adamw", 0.1f));
	run_against_reference(named("adamw", 0.0f));
}

TEST_CASE("PyTorch's Adam and AdamW (epsilon after the bias correction) match the float64 reference")
{
	for (const char* name : {"adam", "adamw"}) {
		CAPTURE(name);
		OptimizerConfig c = named(name, 0.05f);
		c.pytorch_adam = true;
		run_against_reference(c);
		// A large epsilon is where the two forms part: 1e-3 against a corrected root of ~0.3.
		c.epsilon = 1e-3f;
		run_against_reference(c);
	}
}

TEST_CASE("epsilon's place changes the first step as the two forms say")
{
	// At step 1 the corrected root is |g|, the uncorrected one |g| * sqrt(1 - beta2): tower's form
	// adds epsilon to the smaller one, so a large epsilon damps the first step more.
	Fixture tower_form, pytorch_form;
	OptimizerConfig c = named("adam");
	c.epsilon = 1e-2f;
	auto a = make_optimizer(c, tower_form.parameters);
	c.pytorch_adam = true;
	auto b = make_optimizer(c, pytorch_form.parameters);
	const auto before = tower_form.storage[0].value.to_host_f32();
	tower_form.set_gradients(0);
	pytorch_form.set_gradients(0);
	a->step(tower_form.parameters, 0.1f);
	b->step(pytorch_form.parameters, 0.1f);
	const auto moved_tower = tower_form.storage[0].value.to_host_f32();
	const auto moved_pytorch = pytorch_form.storage[0].value.to_host_f32();
	const double g = Fixture::gradient(0, 0, 0);
	CHECK(std::abs(before[0] - moved_pytorch[0]) == doctest::Approx(0.1 * std::abs(g) / (std::abs(g) + 1e-2)).epsilon(1e-5));
	CHECK(std::abs(before[0] - moved_tower[0]) ==
	      doctest::Approx(0.1 * std::abs(g) / (std::abs(g) + 1e-2 / std::sqrt(1 - 0.999))).epsilon(1e-4));
}

TEST_CASE("Adam's first step moves every weight by about lr against the gradient's sign")
{
	// With bias correction, m / sqrt(v) is g / |g| at step 1, whatever the gradient's scale.
	Fixture f;
	const auto before = f.storage[0].value.to_host_f32();
	auto opt = make_optimizer(named("adam"), f.parameters);
	f.set_gradients(0);
	opt->step(f.parameters, 0.01f);
	const auto after = f.storage[0].value.to_host_f32();
	for (size_t i = 0; i < before.size(); ++i) {
		const double g = Fixture::gradient(0, i, 0);
		CHECK(after[i] - before[i] == doctest::Approx(g > 0 ? -0.01 : g < 0 ? 0.01 : 0.0).epsilon(1e-4));
	}
}

TEST_CASE("optimizer state exists at construction, named per parameter, on the parameters' device")
{
	Fixture f;
	auto names_of = [&](const std::string& optimizer) {
		std::vector<std::string> names;
		for (const NamedTensor& t : make_optimizer(named(optimizer), f.parameters)->state()) {
			CHECK(t.tensor.device().name() == "cpu");
			names.push_back(t.name);
		}
		return names;
	};
	CHECK(names_of("sgd") == std::vector<std::string>{"optimizer/step"});
	CHECK(names_of("momentum") ==
	      std::vector<std::string>{"fc1.weight/momentum", "fc1.bias/momentum", "optimizer/step"});
	CHECK(names_of("adamw") == std::vector<std::string>{"fc1.weight/adam_m", "fc1.weight/adam_v", "fc1.bias/adam_m",
							     "fc1.bias/adam_v", "optimizer/step"});
	auto state = by_name(make_optimizer(named("adam"), f.parameters)->state());
	CHECK(state.at("fc1.weight/adam_m").shape() == Shape{4, 9});
	CHECK(state.at("optimizer/step").dtype() == DType::i64);
	for (float x : state.at("fc1.bias/adam_v").to_host_f32())
		CHECK(x == 0.0f);
}

TEST_CASE("writing into the state tensors changes what the next step does")
{
	// A broadcast or checkpoint restore writes into state(); the optimizer must use it.
	Fixture a, b;
	auto first = make_optimizer(named("momentum"), a.parameters);
	auto second = make_optimizer(named("momentum"), b.parameters);
	a.set_gradients(0);
	first->step(a.parameters, 0.1f);
	auto from = first->state();
	auto to = second->state();
	for (size_t i = 0; i < from.size(); ++i)
		to[i].tensor.copy_from(from[i].tensor);
	for (size_t k = 0; k < a.storage.size(); ++k)
		b.storage[k].value.copy_from(a.storage[k].value);
	a.set_gradients(1);
	b.set_gradients(1);
	first->step(a.parameters, 0.1f);
	second->step(b.parameters, 0.1f);
	for (size_t k = 0; k < a.storage.size(); ++k)
		CHECK(a.storage[k].value.to_host_f32() == b.storage[k].value.to_host_f32());
	CHECK(read_step_counter(second->state().back()) == 2);
}

TEST_CASE("an unknown optimizer is an agreed error listing the valid names")
{
	Fixture f;
	try {
		make_optimizer(named("lamb"), f.parameters);
		FAIL("no error");
	} catch (const AgreedError& e) {
		CHECK(std::string(e.what()) == "unknown optimizer 'lamb'; valid optimizers: sgd, momentum, adam, adamw");
	}
}

TEST_CASE("out-of-range settings are agreed errors")
{
	Fixture f;
	OptimizerConfig c = named("adam");
	c.nesterov = true;
	CHECK_THROWS_AS(make_optimizer(c, f.parameters), AgreedError);
	c = named("momentum");
	c.momentum = 1.0f;
	CHECK_THROWS_AS(make_optimizer(c, f.parameters), AgreedError);
	c = named("sgd", -0.1f);
	CHECK_THROWS_AS(make_optimizer(c, f.parameters), AgreedError);
	c = named("adamw");
	c.epsilon = 0.0f;
	CHECK_THROWS_AS(make_optimizer(c, f.parameters), AgreedError);
}

TEST_CASE("stepping with other parameters than the optimizer was made for is an error")
{
	Fixture f, other;
	auto opt = make_optimizer(named("sgd"), f.parameters);
	std::vector<Parameter*> reversed(f.parameters.rbegin(), f.parameters.rend());
	CHECK_THROWS_WITH_AS(opt->step(reversed, 0.1f), doctest::Contains("fc1.bias at position 0"), Error);
	std::vector<Parameter*> fewer = {f.parameters[0]};
	CHECK_THROWS_AS(opt->step(fewer, 0.1f), Error);
	CHECK_THROWS_AS(make_optimizer(named("sgd"), {}), Error);
	Parameter wrong = Fixture::make("w", {3}, 0.0);
	wrong.grad = Tensor::zeros({4}, DType::f32, Device{});
	CHECK_THROWS_WITH_AS(make_optimizer(named("sgd"), {&wrong}), doctest::Contains("gradient has [4]"), Error);
}

TEST_CASE("'none' counts steps and leaves the parameters to the program's framework")
{
	Fixture f;
	const std::vector<float> before = f.storage[0].value.to_host_f32();
	auto opt = make_optimizer(named("none"), f.parameters);
	f.set_gradients(0);
	opt->step(f.parameters, 0.5f);
	opt->step(f.parameters, 0.5f);
	CHECK(f.storage[0].value.to_host_f32() == before);
	const auto state = opt->state();
	REQUIRE(state.size() == 1); // the step counter alone
	CHECK(read_step_counter(state.back()) == 2);
	const auto names = optimizer_names();
	CHECK(std::find(names.begin(), names.end(), "none") == names.end()); // not a trainer's choice
}
