// Shape, dtype and device checks shared by the backends of models/kernels/ops.h.
#include "models/kernels/ops_checks.h"

#include "base/error.h"

namespace tower {

void expect_f32(const Tensor& t, const char* what)
{
	TOWER_CHECK(t.dtype() == DType::f32, "{} is {} but must be f32", what, dtype_name(t.dtype()));
}

void expect_float(const Tensor& t, const char* what)
{
	const DType d = t.dtype();
	TOWER_CHECK(d == DType::f32 || d == DType::f16 || d == DType::bf16, "{} is {} but must be f32, f16 or bf16",
		    what, dtype_name(d));
}

void expect_same_dtype(const Tensor& a, const Tensor& b, const char* what)
{
	TOWER_CHECK(a.dtype() == b.dtype(), "{}: operands of types {} and {} must share one type", what,
		    dtype_name(a.dtype()), dtype_name(b.dtype()));
}

void expect_on(const Tensor& t, const Device& device, const char* what)
{
	TOWER_CHECK(t.device().kind == device.kind && t.device().index == device.index,
		    "{} is on {} but the operation runs on {}", what, t.device().name(), device.name());
}

void expect_same_numel(const Tensor& a, const Tensor& b, const char* what)
{
	TOWER_CHECK(a.numel() == b.numel(), "{}: {} and {} differ in size", what, shape_text(a.shape()),
		    shape_text(b.shape()));
}

GemmDims checked_gemm_dims(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b, const Tensor& c)
{
	expect_float(c, "gemm result c");
	expect_same_dtype(a, c, "gemm");
	expect_same_dtype(b, c, "gemm");
	TOWER_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2, "gemm needs 2-D tensors, got {} {} {}",
		    shape_text(a.shape()), shape_text(b.shape()), shape_text(c.shape()));
	const bool at = ta == Transpose::yes;
	const bool bt = tb == Transpose::yes;
	GemmDims d;
	d.m = at ? a.dim(1) : a.dim(0);
	d.k = at ? a.dim(0) : a.dim(1);
	d.n = bt ? b.dim(0) : b.dim(1);
	const int64_t kb = bt ? b.dim(1) : b.dim(0);
	TOWER_CHECK(kb == d.k && c.dim(0) == d.m && c.dim(1) == d.n,
		    "gemm shapes do not fit: op(a) of {}{} times op(b) of {}{} into {}", shape_text(a.shape()),
		    at ? "^T" : "", shape_text(b.shape()), bt ? "^T" : "", shape_text(c.shape()));
	return d;
}

int64_t checked_bias_outer(const Tensor& y, const Tensor& bias, int64_t inner)
{
	expect_float(y, "biased tensor");
	expect_same_dtype(y, bias, "bias");
	const int64_t per_outer = bias.numel() * inner;
	TOWER_CHECK(inner > 0 && per_outer > 0 && y.numel() % per_outer == 0,
		    "a bias of {} with inner size {} does not tile a tensor of {}", shape_text(bias.shape()), inner,
		    shape_text(y.shape()));
	return y.numel() / per_outer;
}

void check_maxpool(const Tensor& x, const Tensor& y, const Tensor& argmax)
{
	expect_float(x, "pooling input");
	expect_same_dtype(x, y, "pooling");
	TOWER_CHECK(argmax.dtype() == DType::i32, "pooling argmax is {} but must be i32", dtype_name(argmax.dtype()));
	TOWER_CHECK(x.rank() == 4, "pooling input must be [N, C, H, W], got {}", shape_text(x.shape()));
	const Shape want = {x.dim(0), x.dim(1), x.dim(2) / 2, x.dim(3) / 2};
	TOWER_CHECK(y.shape() == want && argmax.shape() == want, "pooling {} needs output and argmax {}, got {} and {}",
		    shape_text(x.shape()), shape_text(want), shape_text(y.shape()), shape_text(argmax.shape()));
}

void check_im2col(const ConvGeometry& g, const Tensor& image, const Tensor& col)
{
	expect_float(image, "im2col image");
	expect_same_dtype(image, col, "im2col");
	TOWER_CHECK(g.kernel > 0 && g.padding >= 0 && g.out_height() > 0 && g.out_width() > 0,
		    "convolution of {}x{} with kernel {} and padding {} has no output", g.height, g.width, g.kernel,
		    g.padding);
	const int64_t plane = g.channels * g.height * g.width;
	TOWER_CHECK(image.numel() > 0 && image.numel() % plane == 0, "images {} are not [n, {}, {}, {}]",
		    shape_text(image.shape()), g.channels, g.height, g.width);
	const int64_t images = image.numel() / plane;
	TOWER_CHECK(col.numel() == g.col_rows() * images * g.col_cols(), "columns {} are not [{}, {} x {}] for {} images",
		    shape_text(col.shape()), g.col_rows(), images, g.col_cols(), images);
}

void check_xent(const Tensor& logits, const Tensor& labels, const Tensor& probs)
{
	expect_float(logits, "logits");
	expect_same_dtype(logits, probs, "cross-entropy");
	TOWER_CHECK(labels.dtype() == DType::i32, "labels are {} but must be i32", dtype_name(labels.dtype()));
	TOWER_CHECK(logits.rank() == 2 && labels.numel() == logits.dim(0) && probs.shape() == logits.shape(),
		    "cross-entropy needs logits [B, K], labels [B] and probs [B, K]; got {}, {} and {}",
		    shape_text(logits.shape()), shape_text(labels.shape()), shape_text(probs.shape()));
}

BatchedGemmDims checked_batched_gemm_dims(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b,
					  const Tensor& c)
{
	TOWER_CHECK(a.rank() == 3 && b.rank() == 3 && c.rank() == 3 && a.dim(0) == b.dim(0) && a.dim(0) == c.dim(0),
		    "batched gemm needs 3-D tensors of one batch count, got {} {} {}", shape_text(a.shape()),
		    shape_text(b.shape()), shape_text(c.shape()));
	BatchedGemmDims d;
	d.batch = a.dim(0);
	// The per-item shapes, checked as a 2-D gemm (views only: nothing is read).
	const auto item = [](const Tensor& t) { return Tensor::view(t.data(), {t.dim(1), t.dim(2)}, t.dtype(), t.device()); };
	static_cast<GemmDims&>(d) = checked_gemm_dims(ta, tb, item(a), item(b), item(c));
	return d;
}

int64_t check_layernorm(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& mean,
			const Tensor& rstd)
{
	expect_float(x, "layernorm input");
	expect_same_dtype(x, y, "layernorm");
	expect_f32(gamma, "layernorm gain");
	expect_f32(mean, "layernorm mean");
	expect_f32(rstd, "layernorm rstd");
	TOWER_CHECK(x.rank() == 2 && y.shape() == x.shape() && gamma.numel() == x.dim(1) && mean.numel() == x.dim(0) &&
			    rstd.numel() == x.dim(0),
		    "layernorm needs x and y [rows, C], gamma [C] and row statistics [rows]; got {}, {}, {} and {}",
		    shape_text(x.shape()), shape_text(y.shape()), shape_text(gamma.shape()), shape_text(mean.shape()));
	return x.dim(0);
}

int64_t check_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
				 const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta)
{
	const int64_t rows = check_layernorm(x, gamma, dy, mean, rstd);
	expect_same_dtype(x, dx, "layernorm backward");
	expect_same_numel(x, dx, "layernorm backward");
	expect_f32(dgamma, "layernorm gain gradient");
	expect_f32(dbeta, "layernorm bias gradient");
	return rows;
}

void check_causal_softmax(const Tensor& scores, const Tensor& probs)
{
	expect_float(scores, "attention scores");
	expect_same_dtype(scores, probs, "causal softmax");
	TOWER_CHECK(scores.rank() == 3 && scores.dim(1) == scores.dim(2) && probs.shape() == scores.shape(),
		    "causal softmax needs scores and probs [N, T, T], got {} and {}", shape_text(scores.shape()),
		    shape_text(probs.shape()));
}

AttentionDims check_causal_attention(const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& probs,
				     const Tensor& out)
{
	expect_float(qkv, "attention's queries, keys and values");
	expect_same_dtype(qkv, probs, "causal attention");
	expect_same_dtype(qkv, out, "causal attention");
	TOWER_CHECK(batch > 0 && heads > 0 && qkv.rank() == 2 && qkv.dim(0) % batch == 0 && qkv.dim(1) % (3 * heads) == 0,
		    "causal attention needs qkv [B * T, 3 * heads * D] for {} sequences and {} heads, got {}", batch, heads,
		    shape_text(qkv.shape()));
	const AttentionDims a{qkv.dim(0) / batch, qkv.dim(1) / (3 * heads)};
	TOWER_CHECK(probs.shape() == Shape({batch * heads, a.time, a.time}) && out.shape() == Shape({qkv.dim(0), heads * a.d}),
		    "causal attention over qkv {} needs probabilities [{}, {}, {}] and output [{}, {}], got {} and {}",
		    shape_text(qkv.shape()), batch * heads, a.time, a.time, qkv.dim(0), heads * a.d,
		    shape_text(probs.shape()), shape_text(out.shape()));
	return a;
}

void check_permute_heads(const Tensor& rows, int64_t offset, const Tensor& heads)
{
	expect_float(rows, "head rows");
	expect_same_dtype(rows, heads, "permute heads");
	TOWER_CHECK(rows.rank() == 3 && heads.rank() == 4 && heads.dim(0) == rows.dim(0) && heads.dim(2) == rows.dim(1) &&
			    offset >= 0 && offset + heads.dim(1) * heads.dim(3) <= rows.dim(2),
		    "heads {} do not fit rows {} from column {}", shape_text(heads.shape()), shape_text(rows.shape()),
		    offset);
}

void check_split_windows(const Tensor& windows, const Tensor& inputs, const Tensor& targets)
{
	for (const Tensor* t : {&windows, &inputs, &targets})
		TOWER_CHECK(t->dtype() == DType::i32, "token windows, inputs and targets are i32, not {}",
			    dtype_name(t->dtype()));
	TOWER_CHECK(windows.rank() == 2 && windows.dim(1) >= 2 &&
			    inputs.numel() == windows.dim(0) * (windows.dim(1) - 1) && targets.numel() == inputs.numel(),
		    "windows {} split into inputs {} and targets {}: need [B, T + 1], [B * T] and [B * T]",
		    shape_text(windows.shape()), shape_text(inputs.shape()), shape_text(targets.shape()));
}

void check_embedding(const Tensor& tokens, const Tensor& table, const Tensor& out, bool table_f32)
{
	TOWER_CHECK(tokens.dtype() == DType::i32, "tokens are {} but must be i32", dtype_name(tokens.dtype()));
	expect_float(out, "embedding output");
	if (table_f32)
		expect_f32(table, "embedding gradient");
	else
		expect_same_dtype(table, out, "embedding");
	TOWER_CHECK(table.rank() == 2 && out.rank() == 2 && out.dim(0) == tokens.numel() && out.dim(1) == table.dim(1),
		    "embedding of tokens {} from table {} into {}: need [N], [V, C] and [N, C]",
		    shape_text(tokens.shape()), shape_text(table.shape()), shape_text(out.shape()));
}

} // namespace tower
