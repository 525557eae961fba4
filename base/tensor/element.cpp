// Reading and writing one element of any dtype as a double, for reference checks and test data.
#include "base/tensor/element.h"

#include <cstdint>
#include <cstring>

#include "base/tensor/half.h"

namespace tower {

namespace {

template <typename T> T load(const char* p)
{
	T x;
	std::memcpy(&x, p, sizeof x);
	return x;
}

template <typename T> void store(char* p, T x)
{
	std::memcpy(p, &x, sizeof x);
}

} // namespace

double element_as_double(const void* base, size_t index, DType dtype)
{
	const char* p = static_cast<const char*>(base) + index * dtype_size(dtype);
	switch (dtype) {
	case DType::f32: return load<float>(p);
	case DType::f64: return load<double>(p);
	case DType::f16: return f16_to_f32(load<uint16_t>(p));
	case DType::bf16: return bf16_to_f32(load<uint16_t>(p));
	case DType::i32: return load<int32_t>(p);
	case DType::i64: return static_cast<double>(load<int64_t>(p));
	}
	return 0;
}

void set_element(void* base, size_t index, DType dtype, double value)
{
	char* p = static_cast<char*>(base) + index * dtype_size(dtype);
	switch (dtype) {
	case DType::f32: store(p, static_cast<float>(value)); break;
	case DType::f64: store(p, value); break;
	case DType::f16: store(p, f32_to_f16(static_cast<float>(value))); break;
	case DType::bf16: store(p, f32_to_bf16(static_cast<float>(value))); break;
	case DType::i32: store(p, static_cast<int32_t>(value)); break;
	case DType::i64: store(p, static_cast<int64_t>(value)); break;
	}
}

} // namespace tower
