// Tests of the CPU backend's 16-bit products where oneDNN has no kernels for the type: the reason
// the trainer prints, and the widened f32 copies they run on (kept memory, the same bits).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "base/tensor/memory_host.h"
#include "models/kernels/cpu/cpu_threads.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/init.h"
#include "models/kernels/ops.h"
#include "test/harness/mpi_main.h"
#include "test/models/reference.h"

using namespace tower;
using namespace tower::test;

namespace {

Tensor random_tensor(const Shape& shape, const char* name)
{
	return Tensor::from_host(seeded_uniform(name, 1, shape_numel(shape), 1.0f), shape, Device{});
}

} // namespace

TEST_CASE("why_products_widen names the kernels oneDNN lacks where 16-bit products are widened to f32")
{
	const Ops& ops = cpu_ops();
	const std::string isa = onednn_isa();
	CAPTURE(isa);
	CHECK(ops.why_products_widen(DType::f32).empty());
	// AVX512_BF16 and AMX have bf16 kernels; AVX2 (the ops-avx2 test) has no 16-bit kernels at all.
	if (isa == "avx512_core_bf16" || isa == "avx512_core_amx")
		CHECK(ops.why_products_widen(DType::bf16).empty());
	if (isa.rfind("avx2", 0) == 0)
		for (DType t : {DType::bf16, DType::f16}) {
			const std::string why = ops.why_products_widen(t);
			CAPTURE(why);
			CHECK(why.find(fmt::format("running its {} kernels here, has no matrix kernels", isa)) !=
			      std::string::npos);
		}
}

TEST_CASE("the CPU backend keeps its widened copies' memory: a repeated 16-bit product allocates nothing")
{
	const Ops& ops = cpu_ops();
	for (DType t : {DType::f16, DType::bf16}) {
		CAPTURE(dtype_name(t));
		if (ops.why_products_widen(t).empty()) {
			MESSAGE("this CPU has kernels for ", dtype_name(t), ": nothing is widened");
			continue;
		}
		auto typed = [&](const Shape& shape, const char* name) {
			Tensor out = Tensor::empty(shape, t, Device{});
			ops.cast(random_tensor(shape, name), out, false);
			return out;
		};
		const Tensor a = typed({64, 48}, "a"), b = typed({40, 48}, "b"), c = typed({64, 40}, "c");
		ops.gemm(Transpose::no, Transpose::yes, 1.0f, a, b, 0.0f, c); // makes the plan and the first copies
		const size_t before = host_allocations();
		for (int i = 0; i < 3; ++i)
			ops.gemm(Transpose::no, Transpose::yes, 1.0f, a, b, 0.0f, c);
		CHECK(host_allocations() == before);
		// The product of the widened operands in f32, rounded once: the same bits.
		const Tensor a32 = Tensor::from_host(a.to_host_f32(), a.shape(), Device{});
		const Tensor b32 = Tensor::from_host(b.to_host_f32(), b.shape(), Device{});
		const Tensor c32 = Tensor::zeros(c.shape(), DType::f32, Device{}), expected = typed(c.shape(), "unused");
		ops.gemm(Transpose::no, Transpose::yes, 1.0f, a32, b32, 0.0f, c32);
		ops.cast(c32, expected, false);
		CHECK(c.to_host_f32() == expected.to_host_f32());
	}
}

TEST_CASE("F32Copy widens into a kept buffer: live copies never share one, and a later copy reuses it")
{
	const Tensor half = Tensor::empty({1000}, DType::bf16, Device{});
	cpu_ops().cast(random_tensor({1000}, "x"), half, false);
	const std::vector<float> widened = half.to_host_f32();
	{
		const F32Copy one(half, true), two(half, true);
		CHECK(one.data() != two.data());
		CHECK(std::vector<float>(one.data(), one.data() + 1000) == widened);
		CHECK(std::vector<float>(two.data(), two.data() + 1000) == widened);
	}
	const size_t before = host_allocations();
	const F32Copy again(half, true);
	CHECK(host_allocations() == before);
	CHECK(std::vector<float>(again.data(), again.data() + 1000) == widened);
	// f32 is the tensor itself, no copy.
	const Tensor f = random_tensor({10}, "f");
	CHECK(F32Copy(f, true).data() == f.data_as<float>());
}
