// MPI datatypes and reduction ops for every tower dtype, including user ops for f16 and bf16.
#include "collectives/transports/mpi_reduce_ops.h"

#include <climits>
#include <cstdint>

#include "collectives/algorithms/reduce_host.h"
#include "base/mpi/mpi_check.h"

namespace tower {

namespace {

// MPI user op: inout[i] = op(in[i], inout[i]), on 16-bit data, through reduce_host.
template <DType D, ReduceOp Op> void user_op(void* in, void* inout, int* len, MPI_Datatype*)
{
	const void* ins[2] = {in, inout};
	reduce_host(inout, ins, 2, static_cast<size_t>(*len), D, Op);
}

template <DType D> void create_ops(MPI_Op (&ops)[3])
{
	TOWER_MPI(MPI_Op_create(&user_op<D, ReduceOp::sum>, 1, &ops[0]));
	TOWER_MPI(MPI_Op_create(&user_op<D, ReduceOp::max>, 1, &ops[1]));
	TOWER_MPI(MPI_Op_create(&user_op<D, ReduceOp::min>, 1, &ops[2]));
}

int op_slot(ReduceOp op)
{
	return op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;
}

} // namespace

MpiReduceOps::MpiReduceOps()
{
	create_ops<DType::f16>(f16_);
	create_ops<DType::bf16>(bf16_);
}

MpiReduceOps::~MpiReduceOps()
{
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (finalized)
		return;
	for (MPI_Op* op : {&f16_[0], &f16_[1], &f16_[2], &bf16_[0], &bf16_[1], &bf16_[2]})
		if (*op != MPI_OP_NULL)
			MPI_Op_free(op);
}

MPI_Op MpiReduceOps::get(DType dtype, ReduceOp op) const
{
	if (dtype == DType::f16)
		return f16_[op_slot(op)];
	if (dtype == DType::bf16)
		return bf16_[op_slot(op)];
	return op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM;
}

MPI_Datatype mpi_datatype(DType dtype)
{
	switch (dtype) {
	case DType::f32: return MPI_FLOAT;
	case DType::f64: return MPI_DOUBLE;
	case DType::f16:
	case DType::bf16: return MPI_UINT16_T;
	case DType::i32: return MPI_INT32_T;
	case DType::i64: return MPI_INT64_T;
	}
	return MPI_DATATYPE_NULL;
}

size_t mpi_max_count(DType dtype)
{
	return (size_t{1} << 30) / dtype_size(dtype);
}

} // namespace tower
