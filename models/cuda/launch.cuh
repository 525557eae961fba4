// Grid sizing and launch checking shared by tower's CUDA kernels.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

namespace tower::cuda {

constexpr int block_threads = 256;

// Enough blocks to cover n threads, capped so grid-stride loops handle the rest.
inline unsigned grid_for(int64_t n)
{
	const int64_t blocks = (n + block_threads - 1) / block_threads;
	return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65535 * 8));
}

} // namespace tower::cuda
