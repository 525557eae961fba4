// Convolution on the CPU through oneDNN's convolution primitives, one set per shape, reused.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/dnnl_cpu.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/ops_checks.h"
#include "base/error.h"

namespace tower {

namespace {

struct ConvKey {
	int64_t batch, channels, height, width, out_channels, kernel, padding;
	DType dtype;

	auto tie() const { return std::tie(batch, channels, height, width, out_channels, kernel, padding, dtype); }
	bool operator<(const ConvKey& o) const { return tie() < o.tie(); }
};

// One tensor argument of a convolution primitive: oneDNN picks the blocked layout its fastest
// kernels want, and the tensor is reordered between tower's plain layout and a buffer of that
// layout, owned by the plan, around each call (nothing to do where the two agree).
struct Staged {
	int arg = 0;
	dnnl::memory::desc plain;
	dnnl::memory::desc chosen;
	dnnl::memory buffer;
	std::unique_ptr<DnnlPrimitive> reorder;

	Staged(int argument, const dnnl::memory::desc& plain_desc, const dnnl::memory::desc& chosen_desc, bool input)
		: arg(argument), plain(plain_desc), chosen(chosen_desc)
	{
		if (plain == chosen)
			return;
		buffer = dnnl::memory(chosen, dnnl_cpu_engine());
		dnnl::primitive_attr attr;
		attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
		const auto& from = input ? plain : chosen;
		const auto& to = input ? chosen : plain;
		const dnnl::reorder::primitive_desc pd(dnnl_cpu_engine(), from, dnnl_cpu_engine(), to, attr);
		reorder = std::make_unique<DnnlPrimitive>(
			dnnl::reorder(pd), pd,
			std::initializer_list<std::pair<int, dnnl::memory::desc>>{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
	}

	// The pointer the convolution reads or writes: the tensor's own, or the buffer's.
	const void* in(const void* tensor) const
	{
		if (!reorder)
			return tensor;
		reorder->run({{DNNL_ARG_FROM, tensor}, {DNNL_ARG_TO, buffer.get_data_handle()}});
		return buffer.get_data_handle();
	}
	void* out(void* tensor) const { return reorder ? buffer.get_data_handle() : tensor; }
	void finish(void* tensor) const
	{
		if (reorder)
			reorder->run({{DNNL_ARG_FROM, buffer.get_data_handle()}, {DNNL_ARG_TO, tensor}});
	}
};

// A convolution primitive with its two inputs and one output.
struct ConvStep {
	std::unique_ptr<DnnlPrimitive> primitive;
	Staged a, b, out;

	void run(const void* a_data, const void* b_data, void* out_data) const
	{
		primitive->run({{a.arg, a.in(a_data)}, {b.arg, b.in(b_data)}, {out.arg, out.out(out_data)}});
		out.finish(out_data);
	}
	bool is_reference() const { return primitive->is_reference(); }
};

template <typename Pd>
ConvStep make_step(const dnnl::primitive& p, const Pd& pd, Staged a, Staged b, Staged out)
{
	auto primitive = std::make_unique<DnnlPrimitive>(p, pd,
							 std::initializer_list<std::pair<int, dnnl::memory::desc>>{
								 {a.arg, a.chosen}, {b.arg, b.chosen}, {out.arg, out.chosen}});
	return {std::move(primitive), std::move(a), std::move(b), std::move(out)};
}

// The forward and both backward primitives of one convolution shape. 16-bit types run natively
// where this CPU has kernels for them; otherwise (widen) the f32 primitives run on widened copies.
struct ConvPlan {
	std::unique_ptr<ConvStep> forward;          // x, w -> y
	std::unique_ptr<ConvStep> backward_data;    // dy, w -> dx
	std::unique_ptr<ConvStep> backward_weights; // x, dy -> dw
	bool widen = false;
	Tensor dw_sum; // backward_weights' output when it is to be added to dw
};

struct ConvDescs {
	dnnl::memory::desc src, weights, dst;
	dnnl::memory::dims strides, padding;
};

ConvDescs conv_descs(const ConvKey& k, DType dtype)
{
	const int64_t oh = k.height + 2 * k.padding - k.kernel + 1, ow = k.width + 2 * k.padding - k.kernel + 1;
	return {dense_desc({k.batch, k.channels, k.height, k.width}, dtype),
		dense_desc({k.out_channels, k.channels, k.kernel, k.kernel}, dtype),
		dense_desc({k.batch, k.out_channels, oh, ow}, dtype),
		{1, 1},
		{k.padding, k.padding}};
}

// The same shape and type with the layout left to oneDNN.
dnnl::memory::desc any_layout(const dnnl::memory::desc& d)
{
	return dnnl::memory::desc(d.dims(), d.data_type(), dnnl::memory::format_tag::any);
}

// The weight gradient's primitive. oneDNN's AVX2 direct kernel (jit:avx2) blocks channels by 8
// and pads an input of fewer channels up to 8 for it, doing up to 8 times the work: the CNN's first
// layer (1 channel, batch 64) took 8.6 ms there and 3.8 ms in its GEMM-based implementation, the
// next in oneDNN's list (Zen 3; docs/cpu-compute.md). Where that is the case the GEMM-based one is
// taken, by this rule rather than by timing both, so that every run and every rank picks the same.
dnnl::convolution_backward_weights::primitive_desc weight_gradient_pd(
	const dnnl::convolution_backward_weights::desc& desc, const dnnl::primitive_attr& attr,
	const dnnl::convolution_forward::primitive_desc& fwd, int64_t channels)
{
	const dnnl::convolution_backward_weights::primitive_desc first(desc, attr, dnnl_cpu_engine(), fwd);
	if (channels >= 8 || std::string(first.impl_info_str()) != "jit:avx2")
		return first;
	// A primitive_desc is a handle: next_impl() moves this one, a second, not the first.
	dnnl::convolution_backward_weights::primitive_desc candidate(desc, attr, dnnl_cpu_engine(), fwd);
	while (candidate.next_impl())
		if (std::string(candidate.impl_info_str()).find("gemm") != std::string::npos)
			return candidate;
	return first;
}

ConvPlan make_conv_plan(const ConvKey& key, DType dtype)
{
	const ConvDescs d = conv_descs(key, dtype);
	const auto src = any_layout(d.src), weights = any_layout(d.weights), dst = any_layout(d.dst);
	dnnl::primitive_attr attr;
	attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
	const auto direct = dnnl::algorithm::convolution_direct;
	const dnnl::convolution_forward::primitive_desc fwd(
		{dnnl::prop_kind::forward_training, direct, src, weights, dst, d.strides, d.padding, d.padding}, attr,
		dnnl_cpu_engine());
	const dnnl::convolution_backward_data::primitive_desc bwd_data(
		{direct, src, weights, dst, d.strides, d.padding, d.padding}, attr, dnnl_cpu_engine(), fwd);
	const auto bwd_weights = weight_gradient_pd({direct, src, weights, dst, d.strides, d.padding, d.padding},
						   attr, fwd, key.channels);
	ConvPlan plan;
	plan.forward = std::make_unique<ConvStep>(make_step(
		dnnl::convolution_forward(fwd), fwd, Staged(DNNL_ARG_SRC, d.src, fwd.src_desc(), true),
		Staged(DNNL_ARG_WEIGHTS, d.weights, fwd.weights_desc(), true),
		Staged(DNNL_ARG_DST, d.dst, fwd.dst_desc(), false)));
	plan.backward_data = std::make_unique<ConvStep>(make_step(
		dnnl::convolution_backward_data(bwd_data), bwd_data,
		Staged(DNNL_ARG_DIFF_DST, d.dst, bwd_data.diff_dst_desc(), true),
		Staged(DNNL_ARG_WEIGHTS, d.weights, bwd_data.weights_desc(), true),
		Staged(DNNL_ARG_DIFF_SRC, d.src, bwd_data.diff_src_desc(), false)));
	plan.backward_weights = std::make_unique<ConvStep>(make_step(
		dnnl::convolution_backward_weights(bwd_weights), bwd_weights,
		Staged(DNNL_ARG_SRC, d.src, bwd_weights.src_desc(), true),
		Staged(DNNL_ARG_DIFF_DST, d.dst, bwd_weights.diff_dst_desc(), true),
		Staged(DNNL_ARG_DIFF_WEIGHTS, d.weights, bwd_weights.diff_weights_desc(), false)));
	return plan;
}

ConvPlan plan_conv(const ConvKey& key)
{
	if (key.dtype != DType::f32) {
		try {
			ConvPlan native = make_conv_plan(key, key.dtype);
			if (!native.forward->is_reference() && !native.backward_data->is_reference() &&
			    !native.backward_weights->is_reference())
				return native;
		} catch (const dnnl::error&) {
			// No implementation at all for this type here: widen, below.
		}
	}
	ConvPlan plan = make_conv_plan(key, DType::f32);
	plan.widen = key.dtype != DType::f32;
	return plan;
}

void check_conv(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& y)
{
	TOWER_CHECK(x.rank() == 4 && x.dim(1) == g.channels && x.dim(2) == g.height && x.dim(3) == g.width &&
			    w.numel() == w.dim(0) * g.col_rows() && y.rank() == 4 && y.dim(0) == x.dim(0) &&
			    y.dim(1) == w.dim(0) && y.dim(2) == g.out_height() && y.dim(3) == g.out_width(),
		    "convolution of {} with weights {} into {} does not match its geometry ({} channels, {}x{}, "
		    "kernel {}, padding {})",
		    shape_text(x.shape()), shape_text(w.shape()), shape_text(y.shape()), g.channels, g.height, g.width,
		    g.kernel, g.padding);
	for (const Tensor* t : {&x, &w, &y})
		expect_on(*t, Device{}, "convolution operand");
	expect_same_dtype(x, w, "convolution weights");
	expect_same_dtype(x, y, "convolution output");
}

// The plan for one call, made on first use; `lock` must be held while it runs.
ConvPlan& conv_plan(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& y,
		    std::unique_lock<std::mutex>& lock)
{
	check_conv(g, x, w, y);
	static std::mutex mutex;
	static std::map<ConvKey, ConvPlan> plans;
	lock = std::unique_lock(mutex);
	// Making a primitive may run parallel code too: the thread count is set before that.
	pin_cpu_threads();
	const ConvKey key{x.dim(0), g.channels, g.height, g.width, w.dim(0), g.kernel, g.padding, x.dtype()};
	auto it = plans.find(key);
	if (it == plans.end())
		it = plans.emplace(key, plan_conv(key)).first;
	return it->second;
}

} // namespace

void CpuOps::conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& y,
			    const Tensor&) const
{
	std::unique_lock<std::mutex> lock;
	ConvPlan& plan = conv_plan(g, x, w, y, lock);
	if (!plan.widen) {
		plan.forward->run(x.data(), w.data(), y.data());
		return;
	}
	const F32Copy fx(x, true), fw(w, true), fy(y, false);
	plan.forward->run(fx.data(), fw.data(), fy.data());
	fy.store();
}

void CpuOps::conv2d_backward_data(const ConvGeometry& g, const Tensor& w, const Tensor& dy, const Tensor& dx,
				  const Tensor&) const
{
	std::unique_lock<std::mutex> lock;
	ConvPlan& plan = conv_plan(g, dx, w, dy, lock);
	if (!plan.widen) {
		plan.backward_data->run(dy.data(), w.data(), dx.data());
		return;
	}
	const F32Copy fdx(dx, false), fw(w, true), fdy(dy, true);
	plan.backward_data->run(fdy.data(), fw.data(), fdx.data());
	fdx.store();
}

void CpuOps::conv2d_backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
				     bool accumulate, const Tensor&) const
{
	std::unique_lock<std::mutex> lock;
	ConvPlan& plan = conv_plan(g, x, dw, dy, lock);
	// oneDNN overwrites its output: a sum goes through a buffer of the plan's own.
	Tensor out = dw;
	if (accumulate) {
		if (plan.dw_sum.numel() != dw.numel() || plan.dw_sum.dtype() != dw.dtype())
			plan.dw_sum = Tensor::empty(dw.shape(), dw.dtype(), Device{});
		out = plan.dw_sum;
	}
	if (!plan.widen) {
		plan.backward_weights->run(x.data(), dy.data(), out.data());
	} else {
		const F32Copy fx(x, true), fdw(out, false), fdy(dy, true);
		plan.backward_weights->run(fx.data(), fdy.data(), fdw.data());
		fdw.store();
	}
	if (accumulate)
		this->accumulate(1.0f, out, dw);
}

} // namespace tower
