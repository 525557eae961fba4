// GPU test: the CUDA update kernels take the same steps as the CPU loops, for every optimizer.
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "optim/optimizer.h"
#include "optim/step_counter.h"
#include "base/device/device.h"
#include "base/tensor/memory.h"
#include "test/harness/mpi_main.h"

using namespace tower;

namespace {

// One parameter large enough to need several blocks of the grid-stride loop.
constexpr int64_t elements = 3 * 1024 * 1024 + 17;
constexpr int steps = 4;

std::vector<float> pattern(double phase)
{
	std::vector<float> v(static_cast<size_t>(elements));
	for (size_t i = 0; i < v.size(); ++i)
		v[i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i) + phase));
	return v;
}

Parameter make(const Device& device)
{
	return {"w", Tensor::from_host(pattern(0.0), {elements}, device), Tensor::zeros({elements}, DType::f32, device), Tensor{}};
}

void compare(const OptimizerConfig& config)
{
	INFO("optimizer " << config.name << (config.nesterov ? " (Nesterov)" : ""));
	const Device gpu{DeviceKind::cuda, 0};
	Parameter on_cpu = make(Device{}), on_gpu = make(gpu);
	auto cpu_opt = make_optimizer(config, {&on_cpu});
	auto gpu_opt = make_optimizer(config, {&on_gpu});
	for (int s = 0; s < steps; ++s) {
		const Tensor g = Tensor::from_host(pattern(1.0 + s), {elements}, Device{});
		on_cpu.grad.copy_from(g);
		on_gpu.grad.copy_from(g);
		cpu_opt->step({&on_cpu}, 0.01f);
		gpu_opt->step({&on_gpu}, 0.01f);
	}
	device_synchronize(gpu);
	const auto a = on_cpu.value.to_host_f32(), b = on_gpu.value.to_host_f32();
	int64_t wrong = 0;
	for (size_t i = 0; i < a.size(); ++i)
		wrong += std::abs(a[i] - b[i]) > 1e-6f + 1e-6f * std::abs(a[i]);
	CHECK(wrong == 0);
	CHECK(read_step_counter(gpu_opt->state().back()) == steps);
	CHECK(gpu_opt->state().back().tensor.device().is_cuda());
}

OptimizerConfig named(const std::string& name, float weight_decay)
{
	OptimizerConfig c;
	c.name = name;
	c.weight_decay = weight_decay;
	return c;
}

} // namespace

TEST_CASE("CUDA optimizer steps equal CPU steps")
{
	select_gpu(0);
	compare(named("sgd", 0.01f));
	compare(named("momentum", 0.01f));
	OptimizerConfig nesterov = named("momentum", 0.0f);
	nesterov.nesterov = true;
	compare(nesterov);
	compare(named("adam", 0.01f));
	compare(named("adamw", 0.1f));
}
