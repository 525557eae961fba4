// The reductions a collective can apply: sum, mean, max, min.
#include "collectives/reduce_op.h"

namespace tower {

std::string_view reduce_op_name(ReduceOp op)
{
	switch (op) {
	case ReduceOp::sum: return "sum";
	case ReduceOp::mean: return "mean";
	case ReduceOp::max: return "max";
	case ReduceOp::min: return "min";
	}
	return "unknown";
}

} // namespace tower
