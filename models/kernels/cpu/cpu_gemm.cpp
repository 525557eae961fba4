// Row-major GEMM on the CPU through oneDNN matmul, one primitive per shape, reused every step.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/cpu_threads.h"
#include "models/kernels/cpu/dnnl_cpu.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/ops_checks.h"
#include "base/error.h"

namespace tower {

namespace {

struct GemmKey {
	int64_t m, n, k, lda, ldb, ldc;
	bool ta, tb;
	DType dtype;
	float alpha, beta;
	DType result = dtype; // c's type: dtype, or f32 for a 16-bit gradient written straight into f32
	int64_t batch = 0;    // > 0: that many products, each operand's items the stride below apart
	int64_t stride_a = 0, stride_b = 0, stride_c = 0;
	int64_t groups = 1; // > 1: that many groups of `batch` products, the group strides apart
	int64_t group_a = 0, group_b = 0, group_c = 0;
	bool bias = false; // a row of n values, of the operands' type, added inside the product

	auto tie() const
	{
		return std::tie(m, n, k, lda, ldb, ldc, ta, tb, dtype, alpha, beta, result, batch, stride_a, stride_b,
				stride_c, groups, group_a, group_b, group_c, bias);
	}
	bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

// A transposed operand is described by its strides, so nothing is ever copied to transpose it.
dnnl::memory::desc operand_desc(int64_t rows, int64_t cols, int64_t ld, bool transposed, DType dtype)
{
	const dnnl::memory::dims strides = transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
	return dnnl::memory::desc({rows, cols}, dnnl_type(dtype), strides);
}

// The same for a batch of items, each `item` elements after the one before, in `groups` groups
// `group` elements apart (a 4-D descriptor; 3-D for one group).
dnnl::memory::desc batched_desc(const GemmKey& key, int64_t rows, int64_t cols, int64_t ld, int64_t item,
				int64_t group, bool transposed, DType dtype)
{
	const dnnl::memory::dims strides = transposed ? dnnl::memory::dims{item, 1, ld} : dnnl::memory::dims{item, ld, 1};
	if (key.groups == 1)
		return dnnl::memory::desc({key.batch, rows, cols}, dnnl_type(dtype), strides);
	dnnl::memory::dims grouped = {group};
	grouped.insert(grouped.end(), strides.begin(), strides.end());
	return dnnl::memory::desc({key.groups, key.batch, rows, cols}, dnnl_type(dtype), grouped);
}

dnnl::memory::desc gemm_operand(const GemmKey& key, int64_t rows, int64_t cols, int64_t ld, int64_t item,
				int64_t group, bool transposed, DType dtype)
{
	return key.batch > 0 ? batched_desc(key, rows, cols, ld, item, group, transposed, dtype)
			     : operand_desc(rows, cols, ld, transposed, dtype);
}

std::unique_ptr<DnnlPrimitive> make_matmul(const GemmKey& key, DType dtype, DType result)
{
	const auto a = gemm_operand(key, key.m, key.k, key.lda, key.stride_a, key.group_a, key.ta, dtype);
	const auto b = gemm_operand(key, key.k, key.n, key.ldb, key.stride_b, key.group_b, key.tb, dtype);
	const auto c = gemm_operand(key, key.m, key.n, key.ldc, key.stride_c, key.group_c, false, result);
	dnnl::primitive_attr attr;
	attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
	if (key.alpha != 1.0f)
		attr.set_output_scales(0, {key.alpha});
	if (key.beta != 0.0f) {
		dnnl::post_ops post;
		post.append_sum(key.beta);
		attr.set_post_ops(post);
	}
	// 16-bit operands accumulate in f32 inside the kernel and are rounded once on the way out,
	// after the bias: in f32 the sum is that of a separate pass, to the bit.
	if (!key.bias) {
		const dnnl::matmul::primitive_desc pd({a, b, c}, attr, dnnl_cpu_engine());
		return std::make_unique<DnnlPrimitive>(dnnl::matmul(pd), pd,
						       std::initializer_list<std::pair<int, dnnl::memory::desc>>{
							       {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
	}
	const dnnl::memory::desc bias({1, key.n}, dnnl_type(dtype), dnnl::memory::dims{key.n, 1});
	const dnnl::matmul::primitive_desc pd({a, b, bias, c}, attr, dnnl_cpu_engine());
	return std::make_unique<DnnlPrimitive>(dnnl::matmul(pd), pd,
					       std::initializer_list<std::pair<int, dnnl::memory::desc>>{
						       {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_BIAS, bias},
						       {DNNL_ARG_DST, c}});
}

// Runs a matmul made above; bias is null where its key has none.
void run_matmul(DnnlPrimitive& primitive, const void* a, const void* b, const void* bias, const void* c)
{
	if (bias == nullptr)
		primitive.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
	else
		primitive.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, c}});
}

// oneDNN's sgemm below AVX-512 (implementation "gemm:jit") reads a non-transposed B in place when
// A has few rows, and then runs at 40-50% of its speed if B's rows lie a multiple of 512 bytes
// apart, 2 KiB or more: the rows it reads together fall into the same L1 cache sets. On Zen 3,
// dz W of a 1024-wide layer at batch 128 ran at 41 GFLOP/s, and at 85 with B's rows one cache
// line further apart; from 384 rows of A on it packs B itself and gains nothing from a copy, and
// under 8 rows the copy costs more than the product (docs/cpu-compute.md, "B's rows on AVX2").
// The AVX-512 kernels (brgemm) are left alone: at the MLP model's shapes (batch 128) either layout
// ran at the same speed, and at the GPT's dz W of 1024 x 1024 x 256 (rows 1 KiB apart), where a
// copy was faster alone, it was slower inside the training step (docs/transformer.md, "Operand
// layouts tried inside the step").
bool b_rows_alias(const GemmKey& key, const DnnlPrimitive& f32_primitive)
{
	const int64_t pitch_bytes = key.ldb * static_cast<int64_t>(sizeof(float));
	return key.batch == 0 && !key.tb && key.m >= 8 && key.m <= 256 && pitch_bytes >= 2048 && pitch_bytes % 512 == 0 &&
	       f32_primitive.implementation().rfind("gemm:jit", 0) == 0;
}

// The primitive a GEMM runs on: 16-bit types natively where this CPU has kernels for them,
// otherwise (widen == true) the f32 primitive on widened copies, as before oneDNN. Where B's
// rows would alias (above), B is first copied (widened) into b_copy, b_pitch floats a row.
struct GemmPlan {
	GemmPlan(std::unique_ptr<DnnlPrimitive> p, bool w, int64_t pitch = 0, int64_t rows = 0)
		: primitive(std::move(p)), widen(w), b_pitch(pitch),
		  b_copy(pitch > 0 ? Tensor::empty({rows, pitch}, DType::f32, Device{}) : Tensor())
	{
	}

	std::unique_ptr<DnnlPrimitive> primitive;
	bool widen;
	int64_t b_pitch;
	Tensor b_copy;
};

// The f32 plan: in place, or on a copy of B whose rows are one cache line further apart.
GemmPlan plan_f32(const GemmKey& key)
{
	auto in_place = make_matmul(key, DType::f32, DType::f32);
	const bool widen = key.dtype != DType::f32;
	if (!b_rows_alias(key, *in_place))
		return {std::move(in_place), widen};
	GemmKey copied = key;
	copied.ldb = key.n + 64 / static_cast<int64_t>(sizeof(float));
	return {make_matmul(copied, DType::f32, DType::f32), widen, copied.ldb, key.k};
}

GemmPlan plan_gemm(const GemmKey& key)
{
	if (key.dtype != DType::f32) {
		try {
			auto native = make_matmul(key, key.dtype, key.dtype);
			if (!native->is_reference())
				return {std::move(native), false};
		} catch (const dnnl::error&) {
			// No implementation at all for this type here: widen, below.
		}
	}
	return plan_f32(key);
}

// 16-bit operands into an f32 result: natively where this CPU has a kernel for it, otherwise the
// f32 primitive on widened copies of the operands, writing c in place. Either way the product is
// accumulated in f32 and never rounded to 16 bits, so every CPU gives a gradient of the same
// precision (before, CPUs without AVX512_BF16 rounded it to bf16 and widened it again).
GemmPlan plan_gemm_into_f32(const GemmKey& key)
{
	try {
		auto native = make_matmul(key, key.dtype, DType::f32);
		if (!native->is_reference())
			return {std::move(native), false};
	} catch (const dnnl::error&) {
	}
	return plan_f32(key);
}

// c = alpha op(a) op(b) + beta c (+ bias) on a plan's primitive; c is f32 or the operands'
// type, bias (where the key has one) the operands' type.
void run_plan(GemmPlan& plan, const GemmKey& key, const Tensor& a, const Tensor& b, const Tensor& c,
	      const Tensor& bias)
{
	if (!plan.widen && plan.b_pitch == 0) {
		run_matmul(*plan.primitive, a.data(), b.data(), key.bias ? bias.data() : nullptr, c.data());
		return;
	}
	// Views where a tensor is f32 already; c is read when beta adds to it, or when c is a strided
	// view with elements between its matrices' entries, which the store must give back unchanged.
	const bool c_gaps = key.batch > 0 && (key.ldc != key.n || key.stride_c != key.m * key.ldc ||
					      (key.groups > 1 && key.group_c != key.batch * key.stride_c));
	const F32Copy fa(a, true), fc(c, key.beta != 0.0f || c_gaps);
	std::optional<F32Copy> fbias;
	if (key.bias)
		fbias.emplace(bias, true);
	std::optional<F32Copy> fb;
	const float* b_data = nullptr;
	if (plan.b_pitch > 0) {
		float* rows = plan.b_copy.data_as<float>();
		for (int64_t r = 0; r < key.k; ++r)
			widen_range(b, r * key.ldb, key.n, rows + r * plan.b_pitch);
		b_data = rows;
	} else {
		b_data = fb.emplace(b, true).data();
	}
	run_matmul(*plan.primitive, fa.data(), b_data, fbias ? fbias->data() : nullptr, fc.data());
	fc.store();
}

// Runs `key` on its plan, made on first use and kept for the process: the plain, batched and
// into-f32 products share one cache (their keys differ in batch and result type).
void run_cached(const GemmKey& key, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& bias = {})
{
	static std::mutex mutex;
	static std::map<GemmKey, GemmPlan> plans;
	const std::lock_guard lock(mutex);
	// Making a primitive may run parallel code too: the thread count is set before that.
	pin_cpu_threads();
	auto it = plans.find(key);
	if (it == plans.end())
		it = plans.emplace(key, key.result != key.dtype ? plan_gemm_into_f32(key) : plan_gemm(key)).first;
	run_plan(it->second, key, a, b, c, bias);
}

} // namespace

void CpuOps::gemm(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
		  const Tensor& c) const
{
	const GemmDims d = checked_gemm_dims(ta, tb, a, b, c);
	for (const Tensor* t : {&a, &b, &c})
		expect_on(*t, Device{}, "gemm operand");
	if (d.m == 0 || d.n == 0)
		return;
	if (d.k == 0) { // an empty product: c = beta * c (oneDNN refuses empty dimensions)
		const F32Copy fc(c, true);
		for (int64_t i = 0, n = c.numel(); i < n; ++i)
			fc.data()[i] = beta == 0.0f ? 0.0f : beta * fc.data()[i];
		fc.store();
		return;
	}
	const GemmKey key{d.m,		      d.n, d.k, a.dim(1), b.dim(1), c.dim(1), ta == Transpose::yes,
			  tb == Transpose::yes, a.dtype(), alpha, beta, a.dtype()};
	run_cached(key, a, b, c);
}

void CpuOps::gemm_bias_act(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu,
			   const Tensor& c) const
{
	const GemmDims d = checked_gemm_dims(ta, tb, a, b, c);
	for (const Tensor* t : {&a, &b, &c, &bias})
		expect_on(*t, Device{}, "gemm operand");
	TOWER_CHECK(bias.numel() == d.n && bias.dtype() == c.dtype(), "gemm bias: {} {} for a product of {} {} columns",
		    dtype_name(bias.dtype()), shape_text(bias.shape()), d.n, dtype_name(c.dtype()));
	if (d.m == 0 || d.n == 0 || d.k == 0) { // oneDNN refuses empty dimensions
		Ops::gemm_bias_act(ta, tb, a, b, bias, relu, c);
		return;
	}
	GemmKey key{d.m,		      d.n, d.k, a.dim(1), b.dim(1), c.dim(1), ta == Transpose::yes,
		    tb == Transpose::yes, a.dtype(), 1.0f, 0.0f, a.dtype()};
	key.bias = true;
	run_cached(key, a, b, c, bias);
	// The ReLU in a pass of its own: oneDNN's ReLU post-op is a max instruction that turns NaN into
	// 0, which would hide a non-finite activation from the step's checks (PyTorch's ReLU keeps it).
	if (relu)
		relu_forward(c, c);
}

namespace {

// The elements a view spans, from its first on, as a flat tensor: what the plans run on.
Tensor span_of(const MatrixBatch& v)
{
	const int64_t extent = (v.groups - 1) * v.group_stride + (v.batch - 1) * v.stride + (v.rows - 1) * v.ld + v.cols;
	auto* first = static_cast<char*>(v.tensor.data()) + static_cast<size_t>(v.offset) * dtype_size(v.tensor.dtype());
	return Tensor::view(first, {extent}, v.tensor.dtype(), v.tensor.device());
}

} // namespace

void CpuOps::gemm_strided_batched(Transpose ta, Transpose tb, float alpha, const MatrixBatch& a, const MatrixBatch& b,
				  float beta, const MatrixBatch& c) const
{
	const GemmDims d = checked_strided_gemm_dims(ta, tb, a, b, c);
	for (const MatrixBatch* v : {&a, &b, &c})
		expect_on(v->tensor, Device{}, "batched gemm operand");
	if (c.batch == 0 || d.m == 0 || d.n == 0)
		return;
	TOWER_CHECK(d.k > 0, "batched gemm over an empty inner dimension ({} x [{}, {}])", a.batch, a.rows, a.cols);
	GemmKey key{d.m,		      d.n, d.k, a.ld, b.ld, c.ld, ta == Transpose::yes,
		    tb == Transpose::yes, a.tensor.dtype(), alpha, beta, a.tensor.dtype()};
	key.batch = c.batch;
	key.stride_a = a.stride;
	key.stride_b = b.stride;
	key.stride_c = c.stride;
	key.groups = c.groups;
	if (c.groups > 1) {
		key.group_a = a.group_stride;
		key.group_b = b.group_stride;
		key.group_c = c.group_stride;
	}
	run_cached(key, span_of(a), span_of(b), span_of(c));
}

std::string CpuOps::why_products_widen(DType type) const
{
	if (type == DType::f32)
		return {};
	// A probe of the layers' kind of product (x W^T), planned as theirs are: where oneDNN has only
	// its reference kernel or none for the type, the plan widens. (The bias and into-f32 forms and
	// the batched products are planned the same way, on the same instruction set.)
	pin_cpu_threads(); // making a primitive may run parallel code, as in run_cached
	const GemmKey probe{64, 64, 64, 64, 64, 64, false, true, type, 1.0f, 0.0f, type};
	if (!plan_gemm(probe).widen)
		return {};
	return fmt::format("oneDNN {}, running its {} kernels here, has no matrix kernels for this type",
			   onednn_version(), onednn_isa());
}

bool CpuOps::gemm_into_f32(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
			   const Tensor& c) const
{
	// bf16 only: it has f32's range, so skipping its rounding changes no overflow. An f16
	// gradient that overflows must still become inf, for the loss scaler to see.
	if (a.dtype() != DType::bf16 || b.dtype() != DType::bf16 || c.dtype() != DType::f32)
		return false;
	const Tensor c16 = Tensor::view(c.data(), c.shape(), DType::bf16, Device{}); // for the checks only
	const GemmDims d = checked_gemm_dims(ta, tb, a, b, c16);
	for (const Tensor* t : {&a, &b, &c})
		expect_on(*t, Device{}, "gemm operand");
	if (d.m == 0 || d.n == 0 || d.k == 0)
		return false;
	const GemmKey key{d.m,		      d.n, d.k, a.dim(1), b.dim(1), c.dim(1), ta == Transpose::yes,
			  tb == Transpose::yes, a.dtype(), alpha, beta, DType::f32};
	run_cached(key, a, b, c);
	return true;
}

} // namespace tower
