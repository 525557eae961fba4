// Strided batched products, shared by every backend: views of blocks of a batch of matrices, their
// checks, and the batched GEMM of whole 3-D tensors as one strided product.
#include "models/kernels/ops.h"
#include "models/kernels/ops_checks.h"
#include "base/error.h"

namespace tower {

MatrixBatch block_of(const Tensor& t, int64_t row0, int64_t rows, int64_t col0, int64_t cols)
{
	TOWER_CHECK(t.rank() == 3 && row0 >= 0 && rows >= 0 && row0 + rows <= t.dim(1) && col0 >= 0 && cols >= 0 &&
			    col0 + cols <= t.dim(2),
		    "block of rows [{}, {}) and columns [{}, {}) does not lie inside the items of {}", row0, row0 + rows,
		    col0, col0 + cols, shape_text(t.shape()));
	return {t, row0 * t.dim(2) + col0, t.dim(0), rows, cols, t.dim(2), t.dim(1) * t.dim(2)};
}

MatrixBatch rows_of(const Tensor& t, int64_t row0, int64_t rows)
{
	TOWER_CHECK(t.rank() == 3, "rows of a batch of matrices need a 3-D tensor, got {}", shape_text(t.shape()));
	return block_of(t, row0, rows, 0, t.dim(2));
}

namespace {

// The element after the last one a view reaches, or its offset when it holds no element.
int64_t view_end(const MatrixBatch& v)
{
	if (v.batch == 0 || v.rows == 0 || v.cols == 0)
		return v.offset;
	return v.offset + (v.batch - 1) * v.stride + (v.rows - 1) * v.ld + v.cols;
}

void check_view(const MatrixBatch& v, const char* name)
{
	TOWER_CHECK(v.offset >= 0 && v.batch >= 0 && v.rows >= 0 && v.cols >= 0 && v.ld >= v.cols && v.stride >= 0 &&
			    view_end(v) <= v.tensor.numel(),
		    "strided gemm operand {}: {} matrices [{}, {}] (row pitch {}, matrix pitch {}) from element {} do not "
		    "fit a tensor of {} elements",
		    name, v.batch, v.rows, v.cols, v.ld, v.stride, v.offset, v.tensor.numel());
}

} // namespace

GemmDims checked_strided_gemm_dims(Transpose ta, Transpose tb, const MatrixBatch& a, const MatrixBatch& b,
				   const MatrixBatch& c)
{
	expect_float(c.tensor, "gemm result c");
	expect_same_dtype(a.tensor, c.tensor, "strided gemm");
	expect_same_dtype(b.tensor, c.tensor, "strided gemm");
	check_view(a, "a");
	check_view(b, "b");
	check_view(c, "c");
	const bool at = ta == Transpose::yes, bt = tb == Transpose::yes;
	GemmDims d;
	d.m = at ? a.cols : a.rows;
	d.k = at ? a.rows : a.cols;
	d.n = bt ? b.rows : b.cols;
	const int64_t kb = bt ? b.cols : b.rows;
	TOWER_CHECK(a.batch == b.batch && a.batch == c.batch && kb == d.k && c.rows == d.m && c.cols == d.n,
		    "strided gemm shapes do not fit: {} x [{}, {}]{} times {} x [{}, {}]{} into {} x [{}, {}]", a.batch,
		    a.rows, a.cols, at ? "^T" : "", b.batch, b.rows, b.cols, bt ? "^T" : "", c.batch, c.rows, c.cols);
	// Results that overlap would be written twice, in no defined order.
	TOWER_CHECK(c.batch <= 1 || c.rows == 0 || c.cols == 0 || c.stride >= (c.rows - 1) * c.ld + c.cols,
		    "strided gemm results overlap: matrices [{}, {}] with row pitch {} lie {} elements apart", c.rows,
		    c.cols, c.ld, c.stride);
	return d;
}

void Ops::gemm_batched(Transpose ta, Transpose tb, float alpha, const Tensor& a, const Tensor& b, float beta,
		       const Tensor& c) const
{
	checked_batched_gemm_dims(ta, tb, a, b, c);
	gemm_strided_batched(ta, tb, alpha, rows_of(a, 0, a.dim(1)), rows_of(b, 0, b.dim(1)), beta,
			     rows_of(c, 0, c.dim(1)));
}

} // namespace tower
