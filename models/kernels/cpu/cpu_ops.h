// The CPU backend of models/kernels/ops.h: oneDNN matmul and convolution, and plain loops the compiler
// vectorizes. Its kernels run on cpu_threads() threads (models/kernels/cpu/cpu_threads.h).
#pragma once

#include "models/kernels/ops.h"

namespace tower {

class CpuOps final : public Ops {
public:
	void gemm(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
		  const Tensor& c) const override;
	std::string why_products_widen(DType type) const override;
	bool gemm_into_f32(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
			   const Tensor& c) const override;
	void fill(const Tensor& x, float value) const override;
	void accumulate(float alpha, const Tensor& x, const Tensor& y) const override;
	void bias_act(const Tensor& y, const Tensor& bias, int64_t inner, bool relu) const override;
	void bias_grad(const Tensor& dy, const Tensor& db, int64_t inner, bool accumulate) const override;
	void gemm_bias_act(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu,
			   const Tensor& c) const override;
	void relu_forward(const Tensor& x, const Tensor& y) const override;
	void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const override;
	void im2col(const ConvGeometry& g, const Tensor& image, const Tensor& col) const override;
	void col2im(const ConvGeometry& g, const Tensor& col, const Tensor& image) const override;
	bool conv_uses_columns() const override { return false; }
	void conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& y,
			    const Tensor& col) const override;
	void conv2d_backward_data(const ConvGeometry& g, const Tensor& w, const Tensor& dy, const Tensor& dx,
				  const Tensor& col) const override;
	void conv2d_backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
				     bool accumulate, const Tensor& col) const override;
	void maxpool_forward(const Tensor& x, const Tensor& y, const Tensor& argmax) const override;
	void maxpool_backward(const Tensor& dy, const Tensor& argmax, const Tensor& dx) const override;
	XentResult softmax_xent_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs) const override;
	void softmax_xent_backward(const Tensor& probs, const Tensor& labels, const Tensor& dlogits,
				   float scale) const override;
	void cast(const Tensor& src, const Tensor& dst, bool accumulate) const override;
	void gemm_strided_batched(Transpose ta, Transpose tb, float alpha, const MatrixBatch& a, const MatrixBatch& b,
				  float beta, const MatrixBatch& c) const override;
	void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
			       const Tensor& mean, const Tensor& rstd) const override;
	void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
				const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
				bool accumulate) const override;
	void add_layernorm_forward(const Tensor& a, const Tensor& b, const Tensor& gamma, const Tensor& beta, float eps,
				   const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) const override;
	void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
				    const Tensor& rstd, const Tensor& residual, const Tensor& dx, const Tensor& dgamma,
				    const Tensor& dbeta, bool accumulate) const override;
	void gelu_forward(const Tensor& x, const Tensor& y) const override;
	void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const override;
	void causal_attention_forward(const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& scores,
				      const Tensor& probs, const Tensor& y) const override;
	void causal_attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t batch,
				       int64_t heads, const Tensor& dprobs, const Tensor& dqkv) const override;
	bool causal_attention_uses_room(DType type) const override;
	void gelu_backward_bias_grad(const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& db,
				     bool accumulate) const override;
	bool gelu_keeps_slope(DType type) const override { return type == DType::f32; }
	void gelu_forward_slope(const Tensor& x, const Tensor& y) const override;
	void slope_backward_bias_grad(const Tensor& slope, const Tensor& dy, const Tensor& dx, const Tensor& db,
				      bool accumulate) const override;
	void causal_softmax_forward(const Tensor& scores, float scale, const Tensor& probs) const override;
	void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
				     const Tensor& dscores) const override;
	void permute_heads(const Tensor& rows, int64_t offset, const Tensor& heads, bool to_heads) const override;
	void split_windows(const Tensor& windows, const Tensor& inputs, const Tensor& targets) const override;
	void embedding_forward(const Tensor& tokens, const Tensor& table, const Tensor& out) const override;
	void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable,
				bool accumulate) const override;
	bool all_finite(const Tensor& x) const override;
	double sum_of_squares(const Tensor& x) const override;
	void scale(const Tensor& x, float factor) const override;
};

} // namespace tower
