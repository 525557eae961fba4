// Row-major GEMM on the CPU through oneDNN matmul, one primitive per shape, reused every step.
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "models/cpu/cpu_ops.h"
#include "models/cpu/dnnl_cpu.h"
#include "models/cpu/f32_copy.h"
#include "models/ops_checks.h"

namespace tower {

namespace {

struct GemmKey {
	int64_t m, n, k, lda, ldb, ldc;
	bool ta, tb;
	DType dtype;
	float alpha, beta;
	DType result = dtype; // c's type: dtype, or f32 for a 16-bit gradient written straight into f32

	auto tie() const { return std::tie(m, n, k, lda, ldb, ldc, ta, tb, dtype, alpha, beta, result); }
	bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

// A transposed operand is described by its strides, so nothing is ever copied to transpose it.
dnnl::memory::desc operand_desc(int64_t rows, int64_t cols, int64_t ld, bool transposed, DType dtype)
{
	const dnnl::memory::dims strides = transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
	return dnnl::memory::desc({rows, cols}, dnnl_type(dtype), strides);
}

std::unique_ptr<DnnlPrimitive> make_matmul(const GemmKey& key, DType dtype, DType result)
{
	const auto a = operand_desc(key.m, key.k, key.lda, key.ta, dtype);
	const auto b = operand_desc(key.k, key.n, key.ldb, key.tb, dtype);
	const auto c = operand_desc(key.m, key.n, key.ldc, false, result);
	dnnl::primitive_attr attr;
	attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
	if (key.alpha != 1.0f)
		attr.set_output_scales(0, {key.alpha});
	if (key.beta != 0.0f) {
		dnnl::post_ops post;
		post.append_sum(key.beta);
		attr.set_post_ops(post);
	}
	// 16-bit operands accumulate in f32 inside the kernel and are rounded once on the way out.
	const dnnl::matmul::primitive_desc pd({a, b, c}, attr, dnnl_cpu_engine());
	return std::make_unique<DnnlPrimitive>(dnnl::matmul(pd), pd,
					       std::initializer_list<std::pair<int, dnnl::memory::desc>>{
						       {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
}

// The primitive a GEMM runs on: 16-bit types natively where this CPU has kernels for them,
// otherwise (widen == true) the f32 primitive on widened copies, as before oneDNN.
struct GemmPlan {
	std::unique_ptr<DnnlPrimitive> primitive;
	bool widen = false;
};

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
	return {make_matmul(key, DType::f32, DType::f32), key.dtype != DType::f32};
}

// 16-bit operands into an f32 result, or nothing where this CPU has no optimized kernel for it.
std::unique_ptr<DnnlPrimitive> plan_gemm_into_f32(const GemmKey& key)
{
	try {
		auto native = make_matmul(key, key.dtype, DType::f32);
		if (!native->is_reference())
			return native;
	} catch (const dnnl::error&) {
	}
	return nullptr;
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
	static std::mutex mutex;
	static std::map<GemmKey, GemmPlan> plans;
	const std::lock_guard lock(mutex);
	// Making a primitive may run parallel code too: the thread count is set before that.
	pin_cpu_threads();
	auto it = plans.find(key);
	if (it == plans.end())
		it = plans.emplace(key, plan_gemm(key)).first;
	const GemmPlan& plan = it->second;
	if (!plan.widen) {
		plan.primitive->run({{DNNL_ARG_SRC, a.data()}, {DNNL_ARG_WEIGHTS, b.data()}, {DNNL_ARG_DST, c.data()}});
		return;
	}
	const F32Copy fa(a, true), fb(b, true), fc(c, beta != 0.0f);
	plan.primitive->run({{DNNL_ARG_SRC, fa.data()}, {DNNL_ARG_WEIGHTS, fb.data()}, {DNNL_ARG_DST, fc.data()}});
	fc.store();
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
	static std::mutex mutex;
	static std::map<GemmKey, std::unique_ptr<DnnlPrimitive>> plans;
	const std::lock_guard lock(mutex);
	pin_cpu_threads();
	auto it = plans.find(key);
	if (it == plans.end())
		it = plans.emplace(key, plan_gemm_into_f32(key)).first;
	if (!it->second)
		return false;
	it->second->run({{DNNL_ARG_SRC, a.data()}, {DNNL_ARG_WEIGHTS, b.data()}, {DNNL_ARG_DST, c.data()}});
	return true;
}

} // namespace tower
