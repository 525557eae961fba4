// GPU test: the GPT on CUDA against the CPU, so every transformer kernel (batched GEMM, LayerNorm,
// GELU, causal softmax, head permutes, embeddings) is checked against its CPU twin; f32 and bf16;
// and the strided products over heads inside rows (two levels of batch) on their own.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "models/gpt.h"
#include "models/kernels/ops.h"
#include "test/gpu/gpu_device.h"
#include "test/harness/mpi_main.h"
#include "test/models/precision_checks.h"

using namespace tower;
using tower::test::check_close;
using tower::test::gpu;

namespace {

// Token windows [batch, context + 1] of bytes, the same every run.
Tensor windows(int64_t batch, int64_t context)
{
	Tensor t = Tensor::empty({batch, context + 1}, DType::i32, Device{});
	for (int64_t i = 0; i < t.numel(); ++i)
		t.data_as<int32_t>()[i] = static_cast<int32_t>((i * 131 + i / 7) % 256);
	return t;
}

Tensor on(const Device& d, const Tensor& host)
{
	Tensor t = Tensor::empty(host.shape(), host.dtype(), d);
	t.copy_from(host);
	return t;
}

// The f32 GPT on the CPU against the same GPT computing in `precision` on the GPU: loss and every
// gradient, each within `tol` (relative L2). The default context (48) is not a multiple of the
// warp, so the softmax's partial rows are covered.
void compare_gpt(DType precision, double loss_tol, double grad_tol, int64_t context = 48, int64_t batch = 6)
{
	const Device g = gpu();
	GptOptions o;
	o.layers = 2;
	o.width = 64;
	o.heads = 4;
	o.context = context;
	o.seed = 5;
	GptModel cpu(o, Device{});
	o.precision = precision;
	GptModel cuda(o, g);
	const Tensor tokens = windows(batch, o.context);
	const float lc = cpu.forward(Batch{{{"tokens", tokens}}}).loss;
	const float lg = cuda.forward(Batch{{{"tokens", on(g, tokens)}}}).loss;
	CHECK(lg == doctest::Approx(lc).epsilon(loss_tol));
	cpu.backward({}, BackwardOptions{});
	cuda.backward({}, BackwardOptions{});
	const auto pc = cpu.parameters(), pg = cuda.parameters();
	REQUIRE(pc.size() == pg.size());
	for (size_t i = 0; i < pc.size(); ++i)
		check_close(pc[i]->grad, pg[i]->grad, grad_tol, pc[i]->name);
}

// Values in [-1, 1), the same every run.
Tensor pattern(std::vector<int64_t> shape, int salt)
{
	Tensor t = Tensor::empty(std::move(shape), DType::f32, Device{});
	for (int64_t i = 0; i < t.numel(); ++i)
		t.data_as<float>()[i] = static_cast<float>((i * 37 + salt * 11) % 64) / 32.0f - 1.0f;
	return t;
}

// c = alpha * a b^T + beta * c over heads inside rows and blocks of scores, on both devices: one
// level of batch (a group of one) and two (sequences, then heads: the GPU writes the matrices'
// addresses and makes one call for all of them).
void compare_strided_heads(int64_t sequences)
{
	const int64_t time = 20, heads = 4, d = 8, width = heads * d;
	const Tensor qkv = pattern({sequences * time, 3 * width}, 1);
	const Tensor scores = pattern({sequences * heads, time, time}, 2);
	const Device g = gpu();
	Tensor qkv_g = on(g, qkv), scores_g = on(g, scores);
	const auto product = [&](const Ops& ops, const Tensor& rows, const Tensor& out) {
		const MatrixBatch q = heads_in_rows(rows, sequences, 0, heads, d);
		const MatrixBatch k = heads_in_rows(rows, sequences, width, heads, d);
		// Queries 4..15 against keys 0..15: a block that starts and ends inside the rows.
		ops.gemm_strided_batched(Transpose::no, Transpose::yes, 0.5f, q.row_range(4, 12), k.row_range(0, 16), 0.25f,
					 block_of(out, 4, 12, 0, 16).grouped(sequences));
		// And back: the scores block times the values into the queries' columns of rows.
		const MatrixBatch v = heads_in_rows(rows, sequences, 2 * width, heads, d);
		ops.gemm_strided_batched(Transpose::no, Transpose::no, 1.0f, block_of(out, 4, 12, 0, 16).grouped(sequences),
					 v.row_range(0, 16), 0.0f, q.row_range(4, 12));
	};
	product(cpu_ops(), qkv, scores);
	product(ops_for(g), qkv_g, scores_g);
	check_close(scores, scores_g, 1e-6, "scores");
	check_close(qkv, qkv_g, 1e-6, "rows with the products written into their query columns");
}

} // namespace

TEST_CASE("strided products over heads inside rows equal the CPU's, at one sequence and at five")
{
	compare_strided_heads(1);
	compare_strided_heads(5);
}

TEST_CASE("the GPT's loss and gradients on the GPU equal the CPU's in f32")
{
	compare_gpt(DType::f32, 1e-5, 1e-4);
}

TEST_CASE("the GPT in f32 at a context past one of the GPU's attention blocks")
{
	// Two blocks, the second partial: the GPU's products skip the masked block there.
	const int64_t context = ops_for(gpu()).causal_attention_block() + 16;
	compare_gpt(DType::f32, 1e-5, 1e-4, context, 2);
}

TEST_CASE("the GPT in bf16 on the GPU stays within bf16's tolerance of the f32 CPU")
{
	// The CPU comparison with PyTorch float64 measured 8e-3 for bf16 (test/models/gpt/).
	compare_gpt(DType::bf16, 1e-3, 3e-2);
}

TEST_CASE("the next token's logits agree between the devices")
{
	const Device g = gpu();
	GptOptions o;
	o.layers = 1;
	o.width = 32;
	o.heads = 2;
	o.context = 16;
	GptModel cpu(o, Device{}), cuda(o, g);
	const std::vector<int32_t> prompt = {84, 104, 101, 32, 99, 97, 116};
	const std::vector<float> a = cpu.next_token_logits(prompt), b = cuda.next_token_logits(prompt);
	REQUIRE(a.size() == b.size());
	for (size_t i = 0; i < a.size(); ++i)
		CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-4));
}
