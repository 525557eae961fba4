// Token embeddings on the GPU: windows into inputs and targets, the table lookup, and its gradient
// summed per table entry in token order (no atomics, so every run gives the same bits).
#include "models/kernels/cuda/kernels.h"
#include "models/kernels/cuda/launch.cuh"

namespace tower::cuda {

namespace {

#define TOWER_GRID_STRIDE(i, n) \
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void split_windows_kernel(const int32_t* windows, int32_t* inputs, int32_t* targets, int64_t b, int64_t t)
{
	TOWER_GRID_STRIDE(e, b * t)
	{
		const int64_t row = e / t, pos = e % t;
		inputs[e] = windows[row * (t + 1) + pos];
		targets[e] = windows[row * (t + 1) + pos + 1];
	}
}

template <typename T>
__global__ void embedding_forward_kernel(const int32_t* tokens, const T* table, T* out, int64_t n, int64_t vocab,
					 int64_t c)
{
	TOWER_GRID_STRIDE(e, n * c)
	{
		const int64_t v = tokens[e / c];
		out[e] = v >= 0 && v < vocab ? table[v * c + e % c] : from_f32<T>(0.0f);
	}
}

// One thread per table entry (v, column) scans the tokens in order: a byte vocabulary is small,
// and the sum's order is fixed.
template <typename T>
__global__ void embedding_backward_kernel(const int32_t* tokens, const T* dout, float* dtable, int64_t n,
					  int64_t vocab, int64_t c, bool accumulate)
{
	TOWER_GRID_STRIDE(e, vocab * c)
	{
		const int64_t v = e / c, col = e % c;
		float sum = accumulate ? dtable[e] : 0.0f;
		for (int64_t i = 0; i < n; ++i)
			if (tokens[i] == v)
				sum += to_f32(dout[i * c + col]);
		dtable[e] = sum;
	}
}

} // namespace

void split_windows(const int32_t* windows, int32_t* inputs, int32_t* targets, int64_t batch, int64_t time)
{
	if (batch * time == 0)
		return;
	split_windows_kernel<<<grid_for(batch * time), block_threads, 0, stream()>>>(windows, inputs, targets, batch, time);
	check_launch("split_windows");
}

void embedding_forward(DType t, const int32_t* tokens, const void* table, void* out, int64_t n, int64_t vocab,
		       int64_t channels)
{
	if (n * channels == 0)
		return;
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		embedding_forward_kernel<<<grid_for(n * channels), block_threads, 0, stream()>>>(
			tokens, static_cast<const T*>(table), static_cast<T*>(out), n, vocab, channels);
	});
	check_launch("embedding_forward");
}

void embedding_backward(DType t, const int32_t* tokens, const void* dout, float* dtable, int64_t n, int64_t vocab,
			int64_t channels, bool accumulate)
{
	if (vocab * channels == 0)
		return;
	with_float_type(t, [&](auto tag) {
		using T = decltype(tag);
		embedding_backward_kernel<<<grid_for(vocab * channels), block_threads, 0, stream()>>>(
			tokens, static_cast<const T*>(dout), dtable, n, vocab, channels, accumulate);
	});
	check_launch("embedding_backward");
}

} // namespace tower::cuda
