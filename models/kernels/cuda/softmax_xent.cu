// Softmax cross-entropy on the GPU: probabilities, per-row losses, their sum and the correct count.
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/cuda/launch.cuh"

namespace tower::cuda {

namespace {

// The larger of two (logit, class) pairs, the lower class of equal logits: the arg-max is the
// first of equal maxima, as on the CPU. A class of -1 is no candidate.
struct Best {
	float value;
	int64_t index;
};

__device__ inline Best better(Best a, Best b)
{
	if (b.index < 0)
		return a;
	if (a.index < 0 || b.value > a.value || (b.value == a.value && b.index < a.index))
		return b;
	return a;
}

__device__ inline Best warp_best(Best b)
{
	for (int offset = warp_lanes / 2; offset > 0; offset /= 2) {
		const Best other{__shfl_xor_sync(0xffffffffu, b.value, offset),
				 __shfl_xor_sync(0xffffffffu, b.index, offset)};
		b = better(b, other);
	}
	return b;
}

// One warp per row, its lanes striding over the classes (10 for the classifiers, 256 for the
// byte-level GPT): every row's maximum, sum and writes are spread over 32 threads. row_loss holds
// 2 * rows floats: each row's loss, then each row's correct flag (0 or 1).
template <typename T>
__global__ void softmax_rows_kernel(const T* logits, const int32_t* labels, T* probs, float* row_loss,
				    int32_t* bad_label, int64_t rows, int64_t k)
{
	const int lane = threadIdx.x % warp_lanes;
	const int64_t warps = int64_t(gridDim.x) * (blockDim.x / warp_lanes);
	// Every lane of a warp takes the same rows, so the shuffles always see a full warp.
	for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / warp_lanes; r < rows; r += warps) {
		const T* z = logits + r * k;
		T* p = probs + r * k;
		Best best{0.0f, -1};
		for (int64_t j = lane; j < k; j += warp_lanes)
			best = better(best, Best{to_f32(z[j]), j});
		best = warp_best(best);
		const float top = best.value;
		float sum = 0.0f;
		for (int64_t j = lane; j < k; j += warp_lanes)
			sum += expf(to_f32(z[j]) - top);
		sum = warp_sum(sum);
		const float inv = 1.0f / sum;
		for (int64_t j = lane; j < k; j += warp_lanes)
			p[j] = from_f32<T>(expf(to_f32(z[j]) - top) * inv);
		if (lane == 0) {
			int64_t label = labels[r];
			if (label < 0 || label >= k) {
				*bad_label = 1;
				label = 0;
			}
			row_loss[r] = logf(sum) - (to_f32(z[label]) - top);
			row_loss[rows + r] = best.index == label ? 1.0f : 0.0f;
		}
	}
}

// One block adds the per-row losses and correct flags in a fixed order (deterministic).
__global__ void sum_rows_kernel(const float* row_loss, float* totals, int64_t rows)
{
	__shared__ float loss[block_threads];
	__shared__ float hits[block_threads];
	float l = 0.0f, h = 0.0f;
	for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
		l += row_loss[r];
		h += row_loss[rows + r];
	}
	loss[threadIdx.x] = l;
	hits[threadIdx.x] = h;
	__syncthreads();
	for (int step = block_threads / 2; step > 0; step /= 2) {
		if (threadIdx.x < step) {
			loss[threadIdx.x] += loss[threadIdx.x + step];
			hits[threadIdx.x] += hits[threadIdx.x + step];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		totals[0] = loss[0];
		totals[1] = hits[0];
	}
}

template <typename T>
__global__ void softmax_xent_backward_kernel(const T* probs, const int32_t* labels, T* dlogits, int64_t rows,
					     int64_t k, float scale)
{
	const int64_t n = rows * k;
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
		const int64_t r = i / k, j = i % k;
		dlogits[i] = from_f32<T>((to_f32(probs[i]) - (labels[r] == j ? 1.0f : 0.0f)) * scale);
	}
}

} // namespace

void softmax_xent_forward(DType t, const void* logits, const int32_t* labels, void* probs, float* row_loss,
			  float* totals, int32_t* bad_label, int64_t rows, int64_t classes)
{
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		softmax_rows_kernel<<<grid_for(rows * warp_lanes), block_threads, 0, stream()>>>(static_cast<const T*>(logits), labels,
									static_cast<T*>(probs), row_loss, bad_label, rows,
									classes);
	});
	check_launch("softmax_xent_forward");
	sum_rows_kernel<<<1, block_threads, 0, stream()>>>(row_loss, totals, rows);
	check_launch("softmax_xent_forward sum");
}

void softmax_xent_backward(DType t, const void* probs, const int32_t* labels, void* dlogits, int64_t rows,
			   int64_t classes, float scale)
{
	const float per_row = scale / static_cast<float>(rows);
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		softmax_xent_backward_kernel<<<grid_for(rows * classes), block_threads, 0, stream()>>>(
			static_cast<const T*>(probs), labels, static_cast<T*>(dlogits), rows, classes, per_row);
	});
	check_launch("softmax_xent_backward");
}

} // namespace tower::cuda
