// Element types of tensors and communication buffers, with their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tower {

enum class DType { f32, f64, f16, bf16, i32, i64 };

// Bytes per element.
size_t dtype_size(DType dtype);

// "f32", "f64", "f16", "bf16", "i32", "i64".
std::string_view dtype_name(DType dtype);

// Parses the names above (and "float", "double", "half", "int", "long" as nccl-tests spells
// them); throws tower::AgreedError listing the valid names otherwise.
DType parse_dtype(std::string_view text);

bool dtype_is_float(DType dtype);

} // namespace tower
