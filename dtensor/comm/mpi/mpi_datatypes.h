// Maps dtensor dtypes and reduce ops onto MPI datatypes and ops.
//
// bf16 and f16 travel as MPI_UINT16_T; their reductions are user-defined MPI ops (MPI_Op_create)
// that load both operands into f32, combine, and round back to nearest even, so every partial
// reduction inside MPI's algorithm is one f32 operation and one rounding. avg is MPI's sum followed
// by a local division by the group size (integers divide with truncation toward zero, like C++).
// bool maps sum and max to logical or, min to logical and; avg of bool is a DTypeError.
#pragma once

#include <mpi.h>

#include <cstddef>

#include "dtensor/comm/process_group.h"

namespace dt::mpi {

// Returns the MPI datatype that moves elements of dtype t.
MPI_Datatype mpi_datatype(DType t);
// Returns the MPI op that reduces dtype t with op (avg → sum). Throws DTypeError for bool avg.
MPI_Op mpi_reduce_op(DType t, ReduceOp op, const char* collective);
// Divides count elements of dtype t in buf by n (the second half of avg).
void divide_in_place(void* buf, size_t count, DType t, int n);

// Creates the user-defined ops (called once by MpiRuntime after MPI_Init) and frees them.
void create_user_ops();
void free_user_ops();

}  // namespace dt::mpi
