// Element types of tensors and communication buffers, with their sizes and names.
#include "base/tensor/dtype.h"

#include "base/error.h"

namespace tower {

size_t dtype_size(DType dtype)
{
	switch (dtype) {
	case DType::f32: return 4;
	case DType::f64: return 8;
	case DType::f16: return 2;
	case DType::bf16: return 2;
	case DType::i32: return 4;
	case DType::i64: return 8;
	}
	return 0;
}

std::string_view dtype_name(DType dtype)
{
	switch (dtype) {
	case DType::f32: return "f32";
	case DType::f64: return "f64";
	case DType::f16: return "f16";
	case DType::bf16: return "bf16";
	case DType::i32: return "i32";
	case DType::i64: return "i64";
	}
	return "unknown";
}

DType parse_dtype(std::string_view text)
{
	if (text == "f32" || text == "float")
		return DType::f32;
	if (text == "f64" || text == "double")
		return DType::f64;
	if (text == "f16" || text == "half")
		return DType::f16;
	if (text == "bf16" || text == "bfloat16")
		return DType::bf16;
	if (text == "i32" || text == "int")
		return DType::i32;
	if (text == "i64" || text == "long")
		return DType::i64;
	throw AgreedError(fmt::format("unknown dtype '{}': use f32, f64, f16, bf16, i32 or i64", text));
}

bool dtype_is_float(DType dtype)
{
	return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

} // namespace tower
