// The default convolution of models/kernels/ops.h: im2col + GEMM one image at a time, for any backend.
#include "models/kernels/ops.h"

namespace tower {

void Ops::conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& y,
			 const Tensor& col) const
{
	const int64_t oc = y.dim(1), pixels = g.col_cols();
	const Tensor w2 = w.reshaped({oc, g.col_rows()});
	// One image at a time keeps the column buffer small enough to stay in cache.
	for (int64_t i = 0; i < x.dim(0); ++i) {
		im2col(g, x.select(i), col);
		gemm(Transpose::no, Transpose::no, 1.0f, w2, col, 0.0f, y.select(i).reshaped({oc, pixels}));
	}
}

void Ops::conv2d_backward_data(const ConvGeometry& g, const Tensor& w, const Tensor& dy, const Tensor& dx,
			       const Tensor& col) const
{
	const int64_t oc = dy.dim(1), pixels = g.col_cols();
	const Tensor w2 = w.reshaped({oc, g.col_rows()});
	for (int64_t i = 0; i < dy.dim(0); ++i) {
		gemm(Transpose::yes, Transpose::no, 1.0f, w2, dy.select(i).reshaped({oc, pixels}), 0.0f, col);
		col2im(g, col, dx.select(i));
	}
}

void Ops::conv2d_backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
				  bool accumulate, const Tensor& col) const
{
	// dW = sum over images of dy_b [oc, pixels] * col_b^T; the columns are rebuilt rather than
	// kept from forward, which would need a batch's worth of them.
	const int64_t oc = dy.dim(1), pixels = g.col_cols();
	const Tensor dw2 = dw.reshaped({oc, g.col_rows()});
	if (dw.dtype() == DType::f32) {
		for (int64_t i = 0; i < x.dim(0); ++i) {
			im2col(g, x.select(i), col);
			const float beta = (i == 0 && !accumulate) ? 0.0f : 1.0f;
			gemm(Transpose::no, Transpose::yes, 1.0f, dy.select(i).reshaped({oc, pixels}), col, beta, dw2);
		}
		return;
	}
	// A 16-bit gradient summed image by image would be rounded once per image, and bf16 drops a
	// term once the sum is ~2^8 times it: the sum is kept in f32 and rounded once at the end.
	const Tensor sum = Tensor::zeros(dw2.shape(), DType::f32, dw.device());
	Tensor product; // one image's term in 16 bits, where the backend cannot write f32 directly
	for (int64_t i = 0; i < x.dim(0); ++i) {
		im2col(g, x.select(i), col);
		const Tensor dy_i = dy.select(i).reshaped({oc, pixels});
		if (gemm_into_f32(Transpose::no, Transpose::yes, 1.0f, dy_i, col, 1.0f, sum))
			continue;
		if (product.data() == nullptr)
			product = Tensor::empty(dw2.shape(), dw.dtype(), dw.device());
		gemm(Transpose::no, Transpose::yes, 1.0f, dy_i, col, 0.0f, product);
		cast(product, sum, true);
	}
	cast(sum, dw2, accumulate);
}

} // namespace tower
