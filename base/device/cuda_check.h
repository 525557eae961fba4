// Checks CUDA runtime calls and turns failures into tower::Error with file and line.
#pragma once

#include <cuda_runtime.h>

#include "base/error.h"

#define TOWER_CUDA(call)                                                                        \
	do {                                                                                    \
		const cudaError_t tower_rc_ = (call);                                           \
		if (tower_rc_ != cudaSuccess)                                                   \
			throw ::tower::Error(fmt::format("{}:{}: {} failed: {}", __FILE__, __LINE__, \
							 #call, cudaGetErrorString(tower_rc_))); \
	} while (0)
