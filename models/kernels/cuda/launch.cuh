// Grid sizing, element-type dispatch and 16-bit loads/stores shared by tower's CUDA kernels.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "base/device/thread_stream.h"
#include "models/kernels/cuda/kernels.h"
#include "base/tensor/dtype.h"

namespace tower::cuda {

constexpr int block_threads = 256;

// Every launch goes to the calling thread's stream (the default stream, or the communication
// thread's own: base/device/stream.h).
inline cudaStream_t stream()
{
	return static_cast<cudaStream_t>(::tower::thread_stream());
}

// Enough blocks to cover n threads, capped so grid-stride loops handle the rest.
inline unsigned grid_for(int64_t n)
{
	const int64_t blocks = (n + block_threads - 1) / block_threads;
	return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65535 * 8));
}

// Kernels read every compute type into f32 and round once when they write.
__device__ inline float to_f32(float v) { return v; }
__device__ inline float to_f32(__half v) { return __half2float(v); }
__device__ inline float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ T from_f32(float v);
template <> __device__ inline float from_f32<float>(float v) { return v; }
template <> __device__ inline __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Warp-wide reductions: every lane of a full warp gets the sum (or the maximum) of all lanes' v.
constexpr int warp_lanes = 32;

__device__ inline float warp_sum(float v)
{
	for (int offset = warp_lanes / 2; offset > 0; offset /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, offset);
	return v;
}

__device__ inline float warp_max(float v)
{
	for (int offset = warp_lanes / 2; offset > 0; offset /= 2)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
	return v;
}

// Calls f(T{}) with T the CUDA type of a compute dtype, so a launcher picks its kernel
// instantiation at run time.
template <typename F> void with_float_type(DType dtype, F&& f)
{
	switch (dtype) {
	case DType::f32:
		f(float{});
		return;
	case DType::f16:
		f(__half{});
		return;
	case DType::bf16:
		f(__nv_bfloat16{});
		return;
	default:
		unsupported_type(dtype);
	}
}

} // namespace tower::cuda
