// tower's element types for PyTorch's.
#pragma once

#include <optional>

#include <c10/core/ScalarType.h>

#include "base/tensor/dtype.h"

namespace tower::torch_adapter {

inline std::optional<DType> tower_dtype(c10::ScalarType type)
{
	switch (type) {
	case c10::ScalarType::Float: return DType::f32;
	case c10::ScalarType::Double: return DType::f64;
	case c10::ScalarType::Half: return DType::f16;
	case c10::ScalarType::BFloat16: return DType::bf16;
	case c10::ScalarType::Int: return DType::i32;
	case c10::ScalarType::Long: return DType::i64;
	default: return std::nullopt;
	}
}

} // namespace tower::torch_adapter
