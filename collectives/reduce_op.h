// The reductions a collective can apply: sum, mean, max, min.
#pragma once

#include <string_view>

namespace tower {

// mean is a sum divided by the number of ranks taking part (the group size with subgroups);
// on integers the division truncates toward zero.
enum class ReduceOp { sum, mean, max, min };

std::string_view reduce_op_name(ReduceOp op);

} // namespace tower
