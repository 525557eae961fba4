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

MatrixBatch MatrixBatch::row_range(int64_t row0, int64_t count) const
{
	TOWER_CHECK(row0 >= 0 && count >= 0 && row0 + count <= rows, "rows [{}, {}) of matrices of {} rows", row0,
		    row0 + count, rows);
	MatrixBatch v = *this;
	v.offset += row0 * ld;
	v.rows = count;
	return v;
}

MatrixBatch MatrixBatch::col_range(int64_t col0, int64_t count) const
{
	TOWER_CHECK(col0 >= 0 && count >= 0 && col0 + count <= cols, "columns [{}, {}) of matrices of {} columns", col0,
		    col0 + count, cols);
	MatrixBatch v = *this;
	v.offset += col0;
	v.cols = count;
	return v;
}

MatrixBatch MatrixBatch::grouped(int64_t count) const
{
	TOWER_CHECK(groups == 1 && count > 0 && batch % count == 0, "{} matrices do not split into {} groups",
		    groups * batch, count);
	MatrixBatch v = *this;
	v.groups = count;
	v.batch = batch / count;
	v.group_stride = stride * v.batch;
	return v;
}

MatrixBatch heads_in_rows(const Tensor& rows, int64_t sequences, int64_t col0, int64_t heads, int64_t d)
{
	TOWER_CHECK(rows.rank() == 2 && sequences > 0 && rows.dim(0) % sequences == 0 && col0 >= 0 &&
			    col0 + heads * d <= rows.dim(1),
		    "{} heads of width {} from column {} do not lie in the rows of {} for {} sequences", heads, d, col0,
		    shape_text(rows.shape()), sequences);
	const int64_t t = rows.dim(0) / sequences, w = rows.dim(1);
	MatrixBatch v{rows, col0, heads, t, d, w, d};
	v.groups = sequences;
	v.group_stride = t * w;
	return v;
}

MatrixBatch rows_of(const Tensor& t, int64_t row0, int64_t rows)
{
	TOWER_CHECK(t.rank() == 3, "rows of a batch of matrices need a 3-D tensor, got {}", shape_text(t.shape()));
	return block_of(t, row0, rows, 0, t.dim(2));
}

namespace {

// The elements one group of a view spans, from its first matrix's first element on.
int64_t group_extent(const MatrixBatch& v)
{
	return (v.batch - 1) * v.stride + (v.rows - 1) * v.ld + v.cols;
}

// The element after the last one a view reaches, or its offset when it holds no element.
int64_t view_end(const MatrixBatch& v)
{
	if (v.groups == 0 || v.batch == 0 || v.rows == 0 || v.cols == 0)
		return v.offset;
	return v.offset + (v.groups - 1) * v.group_stride + group_extent(v);
}

void check_view(const MatrixBatch& v, const char* name)
{
	TOWER_CHECK(v.offset >= 0 && v.groups >= 1 && v.batch >= 0 && v.rows >= 0 && v.cols >= 0 && v.ld >= v.cols &&
			    v.stride >= 0 && v.group_stride >= 0 && view_end(v) <= v.tensor.numel(),
		    "strided gemm operand {}: {} x {} matrices [{}, {}] (row pitch {}, matrix pitch {}, group pitch {}) "
		    "from element {} do not fit a tensor of {} elements",
		    name, v.groups, v.batch, v.rows, v.cols, v.ld, v.stride, v.group_stride, v.offset, v.tensor.numel());
}

// Whether no two matrices of a view share an element: within a group they follow one another or lie
// side by side within each row pitch (heads in rows); groups follow one another.
bool matrices_apart(const MatrixBatch& v)
{
	if (v.rows == 0 || v.cols == 0)
		return true;
	const bool one_after_another = v.stride >= (v.rows - 1) * v.ld + v.cols;
	const bool side_by_side = v.stride >= v.cols && (v.batch - 1) * v.stride + v.cols <= v.ld;
	const bool groups_apart = v.groups == 1 || v.group_stride >= group_extent(v);
	return (v.batch <= 1 || one_after_another || side_by_side) && groups_apart;
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
	TOWER_CHECK(a.batch == b.batch && a.batch == c.batch && a.groups == b.groups && a.groups == c.groups &&
			    kb == d.k && c.rows == d.m && c.cols == d.n,
		    "strided gemm shapes do not fit: {} x {} x [{}, {}]{} times {} x {} x [{}, {}]{} into {} x {} x [{}, {}]",
		    a.groups, a.batch, a.rows, a.cols, at ? "^T" : "", b.groups, b.batch, b.rows, b.cols, bt ? "^T" : "",
		    c.groups, c.batch, c.rows, c.cols);
	// Results that overlap would be written twice, in no defined order.
	TOWER_CHECK(matrices_apart(c),
		    "strided gemm results overlap: {} x {} matrices [{}, {}] with row pitch {}, {} elements apart in groups "
		    "{} apart",
		    c.groups, c.batch, c.rows, c.cols, c.ld, c.stride, c.group_stride);
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
