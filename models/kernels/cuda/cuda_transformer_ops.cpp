// The CUDA backend's transformer operations: the checks around the kernels of layernorm.cu,
// attention.cu, embedding.cu and GELU.
#include "models/kernels/cuda/cuda_ops.h"
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/ops_checks.h"

namespace tower {

void CudaOps::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
				const Tensor& mean, const Tensor& rstd) const
{
	const int64_t rows = check_layernorm(x, gamma, y, mean, rstd);
	expect_f32(beta, "layernorm bias");
	for (const Tensor* t : {&x, &gamma, &beta, &y, &mean, &rstd})
		expect_here(*t, "layernorm operand");
	cuda::layernorm_forward(x.dtype(), x.data(), gamma.data_as<float>(), beta.data_as<float>(), eps, y.data(),
				mean.data_as<float>(), rstd.data_as<float>(), rows, x.dim(1));
}

void CudaOps::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
				 const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
				 bool accumulate) const
{
	const int64_t rows = check_layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
	for (const Tensor* t : {&dy, &x, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta})
		expect_here(*t, "layernorm backward operand");
	cuda::layernorm_backward(x.dtype(), dy.data(), x.data(), gamma.data_as<float>(), mean.data_as<float>(),
				 rstd.data_as<float>(), dx.data(), dgamma.data_as<float>(), dbeta.data_as<float>(), rows,
				 x.dim(1), accumulate);
}

void CudaOps::gelu_forward(const Tensor& x, const Tensor& y) const
{
	expect_float(x, "gelu input");
	expect_same_dtype(x, y, "gelu");
	expect_same_numel(x, y, "gelu");
	expect_here(x, "gelu input");
	expect_here(y, "gelu output");
	cuda::gelu_forward(x.dtype(), x.data(), y.data(), x.numel());
}

void CudaOps::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const
{
	for (const Tensor* t : {&x, &dy, &dx}) {
		expect_float(*t, "gelu backward operand");
		expect_same_dtype(x, *t, "gelu backward");
		expect_same_numel(x, *t, "gelu backward");
		expect_here(*t, "gelu backward operand");
	}
	cuda::gelu_backward(x.dtype(), x.data(), dy.data(), dx.data(), x.numel());
}

void CudaOps::causal_softmax_forward(const Tensor& scores, float scale, const Tensor& probs) const
{
	check_causal_softmax(scores, probs);
	expect_here(scores, "attention scores");
	expect_here(probs, "attention probabilities");
	cuda::causal_softmax_forward(scores.dtype(), scores.data(), scale, probs.data(), scores.dim(0), scores.dim(1));
}

void CudaOps::causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
				      const Tensor& dscores) const
{
	check_causal_softmax(probs, dprobs);
	check_causal_softmax(probs, dscores);
	for (const Tensor* t : {&probs, &dprobs, &dscores})
		expect_here(*t, "causal softmax backward operand");
	cuda::causal_softmax_backward(probs.dtype(), probs.data(), dprobs.data(), scale, dscores.data(), probs.dim(0),
				      probs.dim(1));
}

void CudaOps::permute_heads(const Tensor& rows, int64_t offset, const Tensor& heads, bool to_heads) const
{
	check_permute_heads(rows, offset, heads);
	expect_here(rows, "head rows");
	expect_here(heads, "heads");
	cuda::permute_heads(rows.dtype(), rows.data(), rows.dim(2), offset, heads.data(), heads.dim(0), heads.dim(1),
			    heads.dim(2), heads.dim(3), to_heads);
}

void CudaOps::split_windows(const Tensor& windows, const Tensor& inputs, const Tensor& targets) const
{
	check_split_windows(windows, inputs, targets);
	for (const Tensor* t : {&windows, &inputs, &targets})
		expect_here(*t, "token windows");
	cuda::split_windows(windows.data_as<int32_t>(), inputs.data_as<int32_t>(), targets.data_as<int32_t>(),
			    windows.dim(0), windows.dim(1) - 1);
}

void CudaOps::embedding_forward(const Tensor& tokens, const Tensor& table, const Tensor& out) const
{
	check_embedding(tokens, table, out, false);
	for (const Tensor* t : {&tokens, &table, &out})
		expect_here(*t, "embedding operand");
	cuda::embedding_forward(table.dtype(), tokens.data_as<int32_t>(), table.data(), out.data(), tokens.numel(),
				table.dim(0), table.dim(1));
}

void CudaOps::embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable, bool accumulate) const
{
	check_embedding(tokens, dtable, dout, true);
	for (const Tensor* t : {&tokens, &dout, &dtable})
		expect_here(*t, "embedding gradient operand");
	cuda::embedding_backward(dout.dtype(), tokens.data_as<int32_t>(), dout.data(), dtable.data_as<float>(),
				 tokens.numel(), dtable.dim(0), dtable.dim(1), accumulate);
}

} // namespace tower
