// MPI datatypes and reduction ops for every tower dtype, including user ops for f16 and bf16.
#pragma once

#include <mpi.h>

#include "collectives/reduce_op.h"
#include "base/tensor/dtype.h"

namespace tower {

// MPI has no 16-bit float types, so f16 and bf16 travel as MPI_UINT16_T with user-defined ops that
// accumulate in f32. One object owns those user ops for its lifetime (create after MPI_Init).
class MpiReduceOps {
public:
	MpiReduceOps();
	~MpiReduceOps();
	MpiReduceOps(const MpiReduceOps&) = delete;
	MpiReduceOps& operator=(const MpiReduceOps&) = delete;

	// The op MPI applies for `op` on `dtype`; mean maps to a sum (divide afterwards).
	MPI_Op get(DType dtype, ReduceOp op) const;

private:
	MPI_Op f16_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}; // sum, max, min
	MPI_Op bf16_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

MPI_Datatype mpi_datatype(DType dtype);

// The largest element count a single MPI call takes for `dtype`: counts are int in MPI 3, so
// larger buffers are sent in pieces of at most this many elements (about 1 GiB each).
size_t mpi_max_count(DType dtype);

} // namespace tower
