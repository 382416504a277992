#include "dtensor/comm/mpi/mpi_datatypes.h"

#include <algorithm>

#include "dtensor/comm/mpi/mpi_runtime.h"

namespace dt::mpi {
namespace {

// One user op per (16-bit float type, sum|max|min|prod); MPI_OP_NULL until create_user_ops().
MPI_Op g_half_ops[2][4] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                           {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};

// Combines len elements of in into inout, computing in f32 (MPI_User_function signature).
template <typename Half, int kOp>
void reduce_half(void* in, void* inout, int* len, MPI_Datatype*) {
  const Half* a = static_cast<const Half*>(in);
  Half* b = static_cast<Half*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = float(a[i]), y = float(b[i]);
    float r = kOp == 0 ? x + y : kOp == 1 ? std::max(x, y) : kOp == 2 ? std::min(x, y) : x * y;
    b[i] = Half(r);
  }
}

int half_index(DType t) { return t == DType::bf16 ? 0 : 1; }

}  // namespace

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::bf16: return MPI_UINT16_T;
    case DType::f16: return MPI_UINT16_T;
    case DType::i64: return MPI_INT64_T;
    case DType::i32: return MPI_INT32_T;
    case DType::boolean: return MPI_C_BOOL;
  }
  DT_CHECK(false) << "bad dtype " << int(t);
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_reduce_op(DType t, ReduceOp op, const char* collective) {
  if (t == DType::boolean) {
    if (op == ReduceOp::avg) DT_THROW(DTypeError) << collective << " avg does not support dtype bool";
    return op == ReduceOp::min || op == ReduceOp::prod ? MPI_LAND : MPI_LOR;
  }
  int kind = op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : op == ReduceOp::prod ? 3 : 0;  // avg reduces with sum
  if (t == DType::bf16 || t == DType::f16) {
    MPI_Op user = g_half_ops[half_index(t)][kind];
    DT_CHECK(user != MPI_OP_NULL) << "bf16/f16 MPI ops used before MpiRuntime created them";
    return user;
  }
  return kind == 0 ? MPI_SUM : kind == 1 ? MPI_MAX : kind == 2 ? MPI_MIN : MPI_PROD;
}

void divide_in_place(void* buf, size_t count, DType t, int n) {
  if (t == DType::boolean) DT_THROW(DTypeError) << "avg does not support dtype bool";
  DT_DISPATCH(t, {
    T* p = static_cast<T*>(buf);
    using C = compute_t<T>;
    for (size_t i = 0; i < count; ++i) p[i] = T(C(p[i]) / C(n));
  });
}

void create_user_ops() {
  MpiCallGuard guard;
  check_mpi(MPI_Op_create(&reduce_half<bf16, 0>, 1, &g_half_ops[0][0]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&reduce_half<bf16, 1>, 1, &g_half_ops[0][1]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&reduce_half<bf16, 2>, 1, &g_half_ops[0][2]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&reduce_half<bf16, 3>, 1, &g_half_ops[0][3]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&reduce_half<f16, 0>, 1, &g_half_ops[1][0]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&reduce_half<f16, 1>, 1, &g_half_ops[1][1]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&reduce_half<f16, 2>, 1, &g_half_ops[1][2]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&reduce_half<f16, 3>, 1, &g_half_ops[1][3]), "MPI_Op_create");
}

void free_user_ops() {
  MpiCallGuard guard;
  for (auto& row : g_half_ops)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
}

}  // namespace dt::mpi
