// The default convolution of models/kernels/ops.h: im2col + one GEMM per pass over many images, for any backend.
#include "models/kernels/ops.h"

#include <algorithm>

#include "base/error.h"

namespace tower {

namespace {

// Conv2d's workspace holds at most this much (or one image, if more): at batch 256 the CNN's
// second convolution (800 column rows and 64 channels of 196 pixels, 173 MB in f32) takes two
// passes in f32 and one in bf16.
constexpr size_t workspace_budget_bytes = size_t{128} << 20;

// The default convolution works on `count` images at a time, in the workspace `w`: their
// columns side by side, [C*k*k, count * OH*OW] (column j is pixel j % OH*OW of image j / OH*OW),
// and an output or output gradient in the same order, [OC, count * OH*OW]. Each pass is then
// one GEMM whatever the batch, instead of one per image.
struct Pass {
	int64_t first = 0;
	int64_t count = 0;
	Tensor columns;  // [C*k*k, count * OH*OW]
	Tensor channels; // [OC, count * OH*OW]
};

class Passes {
public:
	Passes(const ConvGeometry& g, int64_t oc, int64_t batch, const Tensor& workspace)
		: g_(g), oc_(oc), batch_(batch), workspace_(workspace)
	{
		const int64_t per_image = conv_workspace_per_image(g, oc);
		TOWER_CHECK(workspace.numel() >= per_image, "the convolution's workspace holds {} elements; one image "
			    "needs {} (size it with conv_workspace_elements)", workspace.numel(), per_image);
		per_pass_ = std::min(batch, workspace.numel() / per_image);
	}

	int64_t count() const { return per_pass_ > 0 ? (batch_ + per_pass_ - 1) / per_pass_ : 0; }

	Pass pass(int64_t index) const
	{
		Pass p;
		p.first = index * per_pass_;
		p.count = std::min(per_pass_, batch_ - p.first);
		const int64_t pixels = p.count * g_.col_cols();
		const Tensor flat = workspace_.reshaped({workspace_.numel()});
		p.columns = flat.prefix({g_.col_rows() * pixels}).reshaped({g_.col_rows(), pixels});
		p.channels = flat.slice(g_.col_rows() * pixels, oc_ * pixels).reshaped({oc_, pixels});
		return p;
	}

private:
	ConvGeometry g_;
	int64_t oc_, batch_;
	Tensor workspace_;
	int64_t per_pass_ = 0;
};

// The images of one pass of x [N, C, ...] or y [N, OC, OH, OW], rows [1, count, rest] for permute_heads.
Tensor pass_rows(const Tensor& t, const Pass& p)
{
	const Tensor part = t.slice(p.first, p.count);
	return part.reshaped({1, p.count, part.numel() / std::max<int64_t>(p.count, 1)});
}

// [OC, count * pixels] viewed as heads [1, OC, count, pixels]: permute_heads moves a pass's
// [count, OC, pixels] to and from it (heads h = channel, t = image, d = pixel).
Tensor pass_heads(const Pass& p, int64_t oc, int64_t pixels)
{
	return p.channels.reshaped({1, oc, p.count, pixels});
}

} // namespace

int64_t conv_workspace_elements(const ConvGeometry& g, int64_t oc, int64_t batch, size_t element_bytes)
{
	const int64_t per_image = conv_workspace_per_image(g, oc);
	const auto fit = static_cast<int64_t>(workspace_budget_bytes / (static_cast<size_t>(per_image) * element_bytes));
	return per_image * std::clamp<int64_t>(fit, 1, std::max<int64_t>(batch, 1));
}

void Ops::conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& y,
			 const Tensor& workspace) const
{
	const int64_t oc = y.dim(1), pixels = g.col_cols();
	const Tensor w2 = w.reshaped({oc, g.col_rows()});
	const Passes passes(g, oc, x.dim(0), workspace);
	for (int64_t i = 0; i < passes.count(); ++i) {
		const Pass p = passes.pass(i);
		im2col(g, x.slice(p.first, p.count), p.columns);
		gemm(Transpose::no, Transpose::no, 1.0f, w2, p.columns, 0.0f, p.channels);
		permute_heads(pass_rows(y, p), 0, pass_heads(p, oc, pixels), false);
	}
}

void Ops::conv2d_backward_data(const ConvGeometry& g, const Tensor& w, const Tensor& dy, const Tensor& dx,
			       const Tensor& workspace) const
{
	const int64_t oc = dy.dim(1), pixels = g.col_cols();
	const Tensor w2 = w.reshaped({oc, g.col_rows()});
	const Passes passes(g, oc, dy.dim(0), workspace);
	for (int64_t i = 0; i < passes.count(); ++i) {
		const Pass p = passes.pass(i);
		permute_heads(pass_rows(dy, p), 0, pass_heads(p, oc, pixels), true);
		gemm(Transpose::yes, Transpose::no, 1.0f, w2, p.channels, 0.0f, p.columns);
		col2im(g, p.columns, dx.slice(p.first, p.count));
	}
}

void Ops::conv2d_backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
				  bool accumulate, const Tensor& workspace) const
{
	// dW = dy [OC, images * pixels] * columns^T: the columns are rebuilt rather than kept from
	// forward, which would hold a batch's worth of them between the passes.
	const int64_t oc = dy.dim(1), pixels = g.col_cols();
	const Tensor dw2 = dw.reshaped({oc, g.col_rows()});
	const Passes passes(g, oc, x.dim(0), workspace);
	auto pass_inputs = [&](int64_t i) {
		const Pass p = passes.pass(i);
		im2col(g, x.slice(p.first, p.count), p.columns);
		permute_heads(pass_rows(dy, p), 0, pass_heads(p, oc, pixels), true);
		return p;
	};
	if (dw.dtype() == DType::f32) {
		for (int64_t i = 0; i < passes.count(); ++i) {
			const Pass p = pass_inputs(i);
			const float beta = (i == 0 && !accumulate) ? 0.0f : 1.0f;
			gemm(Transpose::no, Transpose::yes, 1.0f, p.channels, p.columns, beta, dw2);
		}
		return;
	}
	// One pass over the whole batch is one GEMM, which accumulates in f32 and rounds once.
	if (passes.count() == 1 && !accumulate) {
		const Pass p = pass_inputs(0);
		gemm(Transpose::no, Transpose::yes, 1.0f, p.channels, p.columns, 0.0f, dw2);
		return;
	}
	// A 16-bit gradient would be rounded once per pass, and bf16 drops a term once the sum is
	// ~2^8 times it: the passes are summed in f32 and the sum rounded once at the end.
	const Tensor sum = Tensor::zeros(dw2.shape(), DType::f32, dw.device());
	Tensor product; // one pass's term in 16 bits, where the backend cannot write f32 directly
	for (int64_t i = 0; i < passes.count(); ++i) {
		const Pass p = pass_inputs(i);
		if (gemm_into_f32(Transpose::no, Transpose::yes, 1.0f, p.channels, p.columns, 1.0f, sum))
			continue;
		if (product.data() == nullptr)
			product = Tensor::empty(dw2.shape(), dw.dtype(), dw.device());
		gemm(Transpose::no, Transpose::yes, 1.0f, p.channels, p.columns, 0.0f, product);
		cast(product, sum, true);
	}
	cast(sum, dw2, accumulate);
}

} // namespace tower
