// Times the CPU backend's max pooling and ReLU against oneDNN's pooling and eltwise primitives on
// the CNN's shapes, to show which to use (the backend keeps its own where they win).
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/options/run_fields.h"
#include "models/kernels/cpu/cpu_threads.h"
#include "models/kernels/cpu/dnnl_cpu.h"
#include "models/init.h"
#include "models/model_factory.h"
#include "models/kernels/ops.h"

using namespace tower;

namespace {

double ms_per_call(const std::function<void()>& body, double min_seconds)
{
	for (int i = 0; i < 3; ++i)
		body();
	int calls = 0;
	const auto start = std::chrono::steady_clock::now();
	double elapsed = 0.0;
	while (elapsed < min_seconds) {
		body();
		++calls;
		elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	}
	return 1e3 * elapsed / calls;
}

Tensor typed_random(const Shape& shape, DType dtype, const char* name)
{
	const Tensor f32 = Tensor::from_host(seeded_uniform(name, 0, shape_numel(shape), 1.0f), shape, Device{});
	Tensor t = Tensor::empty(shape, dtype, Device{});
	cpu_ops().cast(f32, t, false);
	return t;
}

void compare_pooling(const Shape& x_shape, DType dtype, double min_seconds)
{
	const Shape y_shape = {x_shape[0], x_shape[1], x_shape[2] / 2, x_shape[3] / 2};
	const Tensor x = typed_random(x_shape, dtype, "x"), dy = typed_random(y_shape, dtype, "dy");
	const Tensor y = Tensor::empty(y_shape, dtype, Device{}), dx = Tensor::empty(x_shape, dtype, Device{});
	const Tensor argmax = Tensor::empty(y_shape, DType::i32, Device{});
	const double ours = ms_per_call(
		[&] {
			cpu_ops().maxpool_forward(x, y, argmax);
			cpu_ops().maxpool_backward(dy, argmax, dx);
		},
		min_seconds);

	const auto xd = dense_desc(x_shape, dtype), yd = dense_desc(y_shape, dtype);
	dnnl::primitive_attr attr;
	attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
	const dnnl::pooling_v2_forward::primitive_desc fwd({dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max,
							    xd, yd, {2, 2}, {2, 2}, {0, 0}, {0, 0}, {0, 0}},
							   attr, dnnl_cpu_engine());
	const dnnl::pooling_v2_backward::primitive_desc bwd(
		{dnnl::algorithm::pooling_max, xd, yd, {2, 2}, {2, 2}, {0, 0}, {0, 0}, {0, 0}}, attr, dnnl_cpu_engine(),
		fwd);
	const dnnl::memory workspace(fwd.workspace_desc(), dnnl_cpu_engine());
	DnnlPrimitive forward(dnnl::pooling_v2_forward(fwd), fwd,
			      {{DNNL_ARG_SRC, xd}, {DNNL_ARG_DST, yd}, {DNNL_ARG_WORKSPACE, fwd.workspace_desc()}});
	DnnlPrimitive backward(
		dnnl::pooling_v2_backward(bwd), bwd,
		{{DNNL_ARG_DIFF_DST, yd}, {DNNL_ARG_DIFF_SRC, xd}, {DNNL_ARG_WORKSPACE, fwd.workspace_desc()}});
	const double theirs = ms_per_call(
		[&] {
			forward.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_DST, y.data()},
				     {DNNL_ARG_WORKSPACE, workspace.get_data_handle()}});
			backward.run({{DNNL_ARG_DIFF_DST, dy.data()}, {DNNL_ARG_DIFF_SRC, dx.data()},
				      {DNNL_ARG_WORKSPACE, workspace.get_data_handle()}});
		},
		min_seconds);
	std::printf("%-26s %-18s %10.3f %10.3f %8.2fx  (%s)\n", "maxpool 2x2 fwd+bwd", shape_text(x_shape).c_str(), ours,
		    theirs, ours / theirs, forward.implementation().c_str());
}

void compare_relu(const Shape& shape, DType dtype, double min_seconds)
{
	const Tensor x = typed_random(shape, dtype, "x"), dy = typed_random(shape, dtype, "dy");
	const Tensor y = Tensor::empty(shape, dtype, Device{}), dx = Tensor::empty(shape, dtype, Device{});
	const double ours = ms_per_call(
		[&] {
			cpu_ops().relu_forward(x, y);
			cpu_ops().relu_backward(y, dy, dx);
		},
		min_seconds);
	const auto d = dense_desc(shape, dtype);
	dnnl::primitive_attr attr;
	attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
	const dnnl::eltwise_forward::primitive_desc fwd(
		{dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu_use_dst_for_bwd, d, 0.0f}, attr,
		dnnl_cpu_engine());
	const dnnl::eltwise_backward::primitive_desc bwd({dnnl::algorithm::eltwise_relu_use_dst_for_bwd, d, d, 0.0f},
							 attr, dnnl_cpu_engine(), fwd);
	DnnlPrimitive forward(dnnl::eltwise_forward(fwd), fwd, {{DNNL_ARG_SRC, d}, {DNNL_ARG_DST, d}});
	DnnlPrimitive backward(dnnl::eltwise_backward(bwd), bwd,
			       {{DNNL_ARG_DST, d}, {DNNL_ARG_DIFF_DST, d}, {DNNL_ARG_DIFF_SRC, d}});
	const double theirs = ms_per_call(
		[&] {
			forward.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_DST, y.data()}});
			backward.run({{DNNL_ARG_DST, y.data()}, {DNNL_ARG_DIFF_DST, dy.data()}, {DNNL_ARG_DIFF_SRC, dx.data()}});
		},
		min_seconds);
	std::printf("%-26s %-18s %10.3f %10.3f %8.2fx  (%s)\n", "relu fwd+bwd", shape_text(shape).c_str(), ours, theirs,
		    ours / theirs, forward.implementation().c_str());
}

} // namespace

int main(int argc, char** argv)
{
	CLI::App app("cpu_ops_bench: tower's CPU pooling and ReLU against oneDNN's, on the CNN's shapes");
	std::string precision = "fp32";
	int64_t batch = 64;
	double min_seconds = 0.3;
	app.add_option("--precision", precision, "fp32, fp16 or bf16");
	app.add_option("--batch", batch, "images per call");
	app.add_option("--min-seconds", min_seconds, "time spent on each case");
	CLI11_PARSE(app, argc, argv);
	const DType dtype = parse_precision(precision);
	std::printf("oneDNN %s, %s kernels, %d thread(s), %s\n", onednn_version(), onednn_isa(), cpu_threads(),
		    precision.c_str());
	std::printf("%-26s %-18s %10s %10s %9s\n", "op", "input", "tower ms", "oneDNN ms", "tower/oneDNN");
	compare_pooling({batch, 32, 28, 28}, dtype, min_seconds);
	compare_pooling({batch, 64, 14, 14}, dtype, min_seconds);
	compare_relu({batch, 32, 28, 28}, dtype, min_seconds);
	compare_relu({batch, 1024}, dtype, min_seconds);
	return 0;
}
