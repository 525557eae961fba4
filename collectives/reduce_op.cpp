// The reductions a collective can apply: sum, mean, max, min.
#include "collectives/reduce_op.h"

#include "base/error.h"

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

ReduceOp parse_reduce_op(std::string_view text)
{
	if (text == "sum")
		return ReduceOp::sum;
	if (text == "mean" || text == "avg")
		return ReduceOp::mean;
	if (text == "max")
		return ReduceOp::max;
	if (text == "min")
		return ReduceOp::min;
	throw AgreedError(fmt::format("unknown reduction '{}': use sum, mean, max or min", text));
}

} // namespace tower
