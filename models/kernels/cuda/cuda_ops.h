// The CUDA backend of models/kernels/ops.h: cuBLAS for GEMM and tower's kernels for the rest.
#pragma once

#include <cublas_v2.h>

#include "models/kernels/ops.h"

namespace tower {

class CudaOps final : public Ops {
public:
	// Makes `device_index` current and creates its cuBLAS handle.
	explicit CudaOps(int device_index);
	~CudaOps() override;
	CudaOps(const CudaOps&) = delete;
	CudaOps& operator=(const CudaOps&) = delete;

	void gemm(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
		  const Tensor& c) const override;
	void fill(const Tensor& x, float value) const override;
	void accumulate(float alpha, const Tensor& x, const Tensor& y) const override;
	void bias_act(const Tensor& y, const Tensor& bias, int64_t inner, bool relu) const override;
	void bias_grad(const Tensor& dy, const Tensor& db, int64_t inner, bool accumulate) const override;
	void relu_forward(const Tensor& x, const Tensor& y) const override;
	void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) const override;
	bool gemm_into_f32(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
			   const Tensor& c) const override;
	void im2col(const ConvGeometry& g, const Tensor& image, const Tensor& col) const override;
	void col2im(const ConvGeometry& g, const Tensor& col, const Tensor& image) const override;
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
	void gelu_forward(const Tensor& x, const Tensor& y) const override;
	void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const override;
	void causal_softmax_forward(const Tensor& scores, float scale, const Tensor& probs) const override;
	void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
				     const Tensor& dscores) const override;
	void permute_heads(const Tensor& rows, int64_t offset, const Tensor& heads, bool to_heads) const override;
	// Blocks of 256 positions: on an H100 the GPT's products at T = 128 cost their launches, not
	// their arithmetic (blocks of 32 took 4x the products and a third more step time at 8
	// windows per step); a longer context still skips the masked blocks.
	int64_t causal_attention_block() const override { return 256; }
	void split_windows(const Tensor& windows, const Tensor& inputs, const Tensor& targets) const override;
	void embedding_forward(const Tensor& tokens, const Tensor& table, const Tensor& out) const override;
	void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable,
				bool accumulate) const override;
	bool all_finite(const Tensor& x) const override;
	double sum_of_squares(const Tensor& x) const override;
	double sum_of_squares_all(const std::vector<Tensor>& xs) const override;
	void scale(const Tensor& x, float factor) const override;

private:
	void expect_here(const Tensor& t, const char* what) const;
	// The cuBLAS handle, bound to the calling thread's stream. The handle and the scratch buffers
	// below are shared by every thread of the process: the GEMMs, reductions and cross-entropy
	// run on one thread at a time (the training thread; the communication thread only casts).
	cublasHandle_t blas() const;

	Device device_;
	cublasHandle_t cublas_ = nullptr;
	// Per-row losses and flags of the cross-entropy (grown to the largest batch seen and then reused).
	mutable Tensor xent_rows_;
	// The bias gradient's per-block partial sums, grown to the most channels seen.
	mutable Tensor bias_partials_;
	// The three pointer arrays of a batched product over grouped views, grown to the most seen.
	mutable Tensor batch_pointers_;
	// The cross-entropy's two totals and its bad-label flag, side by side.
	Tensor xent_results_;
	// Per-block partial sums and the total of sum_of_squares.
	Tensor square_partials_;
	Tensor square_total_;
};

} // namespace tower
