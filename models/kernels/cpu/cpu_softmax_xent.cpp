// Softmax cross-entropy on the CPU: probabilities, mean loss, correct count, and the gradient.
#include <cmath>
#include <vector>

#include "models/kernels/cpu/cpu_ops.h"
#include "models/kernels/cpu/f32_copy.h"
#include "models/kernels/cpu/vector_math.h"
#include "models/kernels/ops_checks.h"
#include "base/error.h"

namespace tower {

namespace {

int64_t checked_label(const int32_t* labels, int64_t row, int64_t classes)
{
	const int64_t label = labels[row];
	TOWER_CHECK(label >= 0 && label < classes, "label {} of sample {} is outside [0, {})", label, row, classes);
	return label;
}

// The first j with x[j] == value (the maximum, so a row's prediction is its first largest logit),
// or 0 where there is none (the maximum of a row whose first element is NaN).
int64_t first_index_of(const float* x, int64_t n, float value)
{
	for (int64_t j = 0; j < n; ++j)
		if (x[j] == value)
			return j;
	return 0;
}

} // namespace

XentResult CpuOps::softmax_xent_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs) const
{
	check_xent(logits, labels, probs);
	const int64_t rows = logits.dim(0), k = logits.dim(1);
	double loss_sum = 0.0;
	int64_t correct = 0;
	// A row at a time: 16-bit rows are widened into `scratch` and rounded back from it.
	std::vector<float> scratch(logits.dtype() == DType::f32 ? 0 : static_cast<size_t>(2 * k));
	for (int64_t r = 0; r < rows; ++r) {
		const F32Piece pz(logits, r * k, k, scratch.data(), true), pp(probs, r * k, k, scratch.data() + k, false);
		const float* z = pz.data();
		float* p = pp.data();
		const int64_t label = checked_label(labels.data_as<int32_t>(), r, k);
		// Subtracting the maximum keeps exp() finite for any logits. The maximum, the exponentials
		// and their sum in vectors (the GPT's rows are 256 wide: a scalar expf call and one running
		// sum per element took 0.95 ms of its step, 0.2 of it in expf); a NaN logit makes the sum
		// and the loss NaN. A logit more than 87.3 below the maximum (-inf too) gets
		// e^-87.3 / sum, about 1e-38 / sum, where expf gave 0 (vector_math.cpp's clamp).
		const float top = max_f32(z, k);
		const int64_t best = first_index_of(z, k, top);
		exp_shifted_f32(z, top, 1.0f, p, k);
		const float sum = lane_sum(k, [&](int64_t j) { return p[j]; });
		const float inv = 1.0f / sum;
		for (int64_t j = 0; j < k; ++j)
			p[j] *= inv;
		loss_sum += std::log(sum) - (z[label] - top);
		correct += best == label ? 1 : 0;
		pp.store();
	}
	return {rows > 0 ? static_cast<float>(loss_sum / static_cast<double>(rows)) : 0.0f, correct};
}

void CpuOps::softmax_xent_backward(const Tensor& probs, const Tensor& labels, const Tensor& dlogits,
				   float loss_scale) const
{
	check_xent(probs, labels, dlogits);
	const int64_t rows = probs.dim(0), k = probs.dim(1);
	const float scale = loss_scale / static_cast<float>(rows);
	std::vector<float> scratch(probs.dtype() == DType::f32 ? 0 : static_cast<size_t>(2 * k));
	for (int64_t r = 0; r < rows; ++r) {
		const F32Piece pp(probs, r * k, k, scratch.data(), true), pd(dlogits, r * k, k, scratch.data() + k, false);
		const float* p = pp.data();
		float* d = pd.data();
		const int64_t label = checked_label(labels.data_as<int32_t>(), r, k);
		// (p - 1) * scale, not p * scale - scale: a huge loss scale must overflow the same way on
		// every backend.
		for (int64_t j = 0; j < k; ++j)
			d[j] = (p[j] - (j == label ? 1.0f : 0.0f)) * scale;
		pd.store();
	}
}

} // namespace tower
