// Asynchronous collectives whose Work travels with the tensor (PyTorch's CommTensor).
//
// Eager: all_reduce_(pg, t) issues the collective and returns at once; the first reader of the
// result (wait(), or the implicit conversion to const Tensor& that every kernel argument goes
// through) waits on the Work, exactly once; later readers do not wait again.
//
// Tracing: the same calls on a Tracer and an ir::Value record the collective node into the graph
// and return a CommTensor holding its result; value() records the wait_tensor at the current end
// of the graph — that is, right before the first consumer, which is recorded next — once.
#pragma once

#include <string>

#include "dtensor/comm/process_group.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ir/builder.h"

namespace dt::eager {

class CommTensor {
 public:
  CommTensor(Tensor t, WorkPtr work) : tensor_(std::move(t)), work_(std::move(work)) {}
  CommTensor(ir::Builder& builder, ir::Value* issued) : builder_(&builder), traced_(issued) {}

  bool traced() const { return builder_ != nullptr; }
  // Eager: true until the first reader waited.
  bool pending() const { return work_ != nullptr; }
  // Eager: waits for the collective (the first time) and returns the result.
  const Tensor& wait();
  operator const Tensor&() { return wait(); }
  // Tracing: returns the waited value, recording wait_tensor the first time.
  ir::Value* value();

 private:
  Tensor tensor_;
  WorkPtr work_;
  ir::Builder* builder_ = nullptr;
  ir::Value* traced_ = nullptr;
  ir::Value* waited_ = nullptr;
};

// Eager collectives (inputs must stay alive until the result is read; all_reduce_ works in
// place on t's buffer).
CommTensor all_reduce_(ProcessGroup& pg, Tensor t, ReduceOp op = ReduceOp::sum);
CommTensor all_gather(ProcessGroup& pg, const Tensor& t);
CommTensor reduce_scatter(ProcessGroup& pg, const Tensor& t, ReduceOp op = ReduceOp::sum);

// Traced collectives: record the collective on `group` (a group declared in the builder's graph).
CommTensor all_reduce_(ir::Builder& b, ir::Value* x, const std::string& group, ReduceOp op = ReduceOp::sum);
CommTensor all_gather(ir::Builder& b, ir::Value* x, const std::string& group);
CommTensor reduce_scatter(ir::Builder& b, ir::Value* x, const std::string& group, ReduceOp op = ReduceOp::sum);

}  // namespace dt::eager
