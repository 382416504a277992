#include "dtensor/eager/comm_tensor.h"

#include "dtensor/comm/collectives.h"
#include "dtensor/core/error.h"

namespace dt::eager {

const Tensor& CommTensor::wait() {
  DT_CHECK(!traced()) << "wait() on a traced CommTensor (use value())";
  if (work_) {
    WorkPtr w = std::move(work_);
    work_.reset();
    w->wait();
  }
  return tensor_;
}

ir::Value* CommTensor::value() {
  DT_CHECK(traced()) << "value() on an eager CommTensor (use wait())";
  if (!waited_) waited_ = builder_->wait_tensor(traced_);
  return waited_;
}

CommTensor all_reduce_(ProcessGroup& pg, Tensor t, ReduceOp op) {
  Tensor buf = t.contiguous();
  WorkPtr w = dt::all_reduce_(pg, buf, op);
  return CommTensor(std::move(buf), std::move(w));
}

CommTensor all_gather(ProcessGroup& pg, const Tensor& t) {
  Tensor in = t.contiguous();
  Shape s = in.shape();
  DT_CHECK(!s.empty()) << "all_gather of a 0-d tensor";
  s[0] *= pg.size();
  Tensor out = Tensor::uninitialized(s, in.dtype());
  // The Work keeps `in` and `out` alive until the collective completes (dt::all_gather_into_tensor).
  WorkPtr w = dt::all_gather_into_tensor(pg, out, in);
  return CommTensor(std::move(out), std::move(w));
}

CommTensor reduce_scatter(ProcessGroup& pg, const Tensor& t, ReduceOp op) {
  Tensor in = t.contiguous();
  Shape s = in.shape();
  DT_CHECK(!s.empty() && s[0] % pg.size() == 0) << "reduce_scatter of " << in.str() << " over " << pg.size() << " ranks";
  s[0] /= pg.size();
  Tensor out = Tensor::uninitialized(s, in.dtype());
  WorkPtr w = dt::reduce_scatter_tensor(pg, out, in, op);
  return CommTensor(std::move(out), std::move(w));
}

CommTensor all_reduce_(ir::Builder& b, ir::Value* x, const std::string& group, ReduceOp op) {
  return CommTensor(b, b.all_reduce(x, group, std::string(reduce_op_name(op))));
}
CommTensor all_gather(ir::Builder& b, ir::Value* x, const std::string& group) {
  return CommTensor(b, b.all_gather_into_tensor(x, group));
}
CommTensor reduce_scatter(ir::Builder& b, ir::Value* x, const std::string& group, ReduceOp op) {
  return CommTensor(b, b.reduce_scatter_tensor(x, group, std::string(reduce_op_name(op))));
}

}  // namespace dt::eager
