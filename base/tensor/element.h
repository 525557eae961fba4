// Reading and writing one element of any dtype as a double, for reference checks and test data.
#pragma once

#include <cstddef>

#include "base/tensor/dtype.h"

namespace tower {

// Element `index` of an array of `dtype` at `base`, widened to double.
double element_as_double(const void* base, size_t index, DType dtype);

// Stores `value` as element `index`, rounded to nearest-even for floats and truncated for integers.
void set_element(void* base, size_t index, DType dtype, double value);

} // namespace tower
